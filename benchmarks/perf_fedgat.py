"""FedGAT performance: round time vs centralised GAT, and the protocol's pre-training cost.

1. Per-round training time on Cora: FedGAT (fast backend, 10 clients, E local steps each, all
   clients in one process: batched, and one after the other) vs the centralised GAT taking the
   same E steps on the full graph, over ``--rounds`` rounds (no evaluation inside the timed
   phase); DistGAT likewise; and each client's own ``fit`` timed alone.
2. The protocol backend's pre-training round on Cora and CiteSeer (10 clients, β = 1): wall
   time, bytes sent (ledger), the largest client's share, and the peak resident memory of a
   fresh process holding the server and every client (``ru_maxrss``). Each case runs in its own
   child process with an address-space limit (``--mem-limit-gb``), so that an infeasible case
   fails alone instead of exhausting a shared machine.

    FEDGL_DATA=../shared/data python benchmarks/perf_fedgat.py

Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time


def round_times(dataset: str, rounds: int, local_steps: int) -> dict:
    import fedgl

    out = {}
    common = dict(dataset=dataset, rounds=rounds, local_steps=local_steps, lr=0.5,
                  weight_decay=5e-4, dropout=0.0, eval_every=rounds, oracle_eval=False,
                  progress=False, clients=10, beta=1.0)
    for name, kw in (("centralized-gat", {"algorithm": "centralized-gat"}),
                     ("fedgat-fast", {"algorithm": "fedgat", "fedgat_backend": "fast"}),
                     ("fedgat-fast-one-by-one", {"algorithm": "fedgat", "fedgat_backend": "fast",
                                                 "batch_clients": False}),
                     ("distgat", {"algorithm": "distgat"}),
                     ("distgat-one-by-one", {"algorithm": "distgat", "batch_clients": False})):
        r = fedgl.run(**common, **kw).repeats[0]
        # subtract the single evaluation at the last round (timed separately by the ledger)
        train = r.seconds["train"]
        out[name] = {"train_seconds": train, "seconds_per_round": train / rounds,
                     "pretrain_seconds": r.seconds.get("pretrain", 0.0),
                     "pretrain_bytes": r.final["pretrain_bytes"]}
    c = out["centralized-gat"]["seconds_per_round"]
    out["fedgat_round_over_centralized_steps"] = out["fedgat-fast"]["seconds_per_round"] / c
    out["fedgat_one_by_one_over_centralized_steps"] = (
        out["fedgat-fast-one-by-one"]["seconds_per_round"] / c)
    out["fedgat_client_fits"] = client_fit_times(dataset, rounds, local_steps)
    out["slowest_client_over_centralized_steps"] = (
        out["fedgat_client_fits"]["slowest_client_seconds"] / c)
    return out


def client_fit_times(dataset: str, rounds: int, local_steps: int) -> dict:
    """Each FedGAT client's ``fit`` timed on its own (same global model every round): the
    slowest client is a round's critical path when clients run in parallel (one per machine)."""
    from functools import partial

    from fedgl.algorithms.fedgat import FedGATClient, FedGATServer, gat_initial_weights
    from fedgl.algorithms.runner import build_federation
    from fedgl.api import as_config, load_graph
    from fedgl.data.shards import make_partition

    cfg = as_config(algorithm="fedgat", dataset=dataset, clients=10, beta=1.0, lr=0.5,
                    weight_decay=5e-4, dropout=0.0, progress=False)
    graph = load_graph(cfg)
    init = gat_initial_weights(cfg, graph.num_features, graph.num_classes, 0)
    server = build_federation(graph, make_partition(graph, cfg, 0), cfg, 0, FedGATClient,
                              partial(FedGATServer, gat_weights=init, seed=0))
    server.pretrain()
    slowest, total = [], []
    for t in range(1, rounds + 1):
        per = []
        for k in server.runtime.client_ids:
            client = server.runtime.local_client(k)
            t0 = time.perf_counter()
            client.fit(server.weights, local_steps, round=t)
            per.append(time.perf_counter() - t0)
        slowest.append(max(per))
        total.append(sum(per))
    return {"slowest_client_seconds": sum(slowest) / rounds,
            "all_clients_seconds": sum(total) / rounds}


def protocol_child(dataset: str, clients: int, max_degree: int, train_rounds: int,
                   runtime: str = "local") -> dict:
    """Runs in a fresh process: the protocol pre-training round (and optionally a few rounds).
    With ``runtime="ray"`` every client is its own process, so the driver's peak memory is the
    server's and each client reports its own."""
    import torch

    torch.set_num_threads(1)
    import fedgl

    t0 = time.perf_counter()
    r = fedgl.run(dataset=dataset, algorithm="fedgat", fedgat_backend="protocol",
                  runtime=runtime,
                  clients=clients, beta=1.0, rounds=train_rounds, local_steps=3, lr=0.5,
                  weight_decay=5e-4, dropout=0.0, oracle_eval=False, progress=False,
                  eval_every=max(train_rounds, 1), fedgat_max_degree=max_degree,
                  fedgat_node_mb=4096)
    rep = r.repeats[0]
    stats = rep.extra["fedgat"]
    led = rep.ledger
    per_client = led["bytes_per_client"]["pretrain"]["down"]
    out = {"dataset": dataset, "clients": clients, "max_degree": max_degree, "runtime": runtime,
           "pretrain_seconds": rep.seconds["pretrain"],
           "pretrain_bytes_down": led["bytes"]["pretrain"]["down"],
           "pretrain_bytes_up": led["bytes"]["pretrain"]["up"],
           "largest_client_bytes": max(per_client.values()),
           "planned_protocol_bytes": stats["protocol_bytes"],
           "paper_scalars": stats["paper_scalars"], "max_node_mb": stats["max_node_mb"],
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
           "wall_seconds": time.perf_counter() - t0}
    if "client_peak_rss_mb" in rep.extra:
        out["server_peak_rss_mb"] = out.pop("peak_rss_mb")
        out["client_peak_rss_mb"] = max(rep.extra["client_peak_rss_mb"].values())
    if train_rounds:
        out["train_seconds_per_round"] = rep.seconds["train"] / train_rounds
        out["test_acc_after"] = rep.final["test_acc"]
    return out


def run_child(args: argparse.Namespace, dataset: str, clients: int, max_degree: int,
              runtime: str = "local") -> dict:
    cmd = [sys.executable, __file__, "--child", dataset, str(clients), str(max_degree),
           str(args.protocol_train_rounds), runtime, "--mem-limit-gb", str(args.mem_limit_gb)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.child_timeout)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        return {"dataset": dataset, "clients": clients, "max_degree": max_degree,
                "runtime": runtime, "failed": tail[0], "wall_seconds": time.perf_counter() - t0}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50, help="timed rounds (part 1)")
    parser.add_argument("--local-steps", type=int, default=3)
    parser.add_argument("--datasets", nargs="+", default=["cora", "citeseer"])
    parser.add_argument("--clients", type=int, nargs="+", default=[10])
    parser.add_argument("--max-degrees", type=int, nargs="+", default=[0],
                        help="protocol runs with these degree caps (0: none)")
    parser.add_argument("--protocol-train-rounds", type=int, default=0,
                        help="also time this many protocol-backend training rounds")
    parser.add_argument("--mem-limit-gb", type=float, default=12.0)
    parser.add_argument("--child-timeout", type=int, default=1800)
    parser.add_argument("--ray", action="store_true",
                        help="also run each protocol case on the Ray runtime (one process per "
                             "client): the server's and the largest client's peak memory")
    parser.add_argument("--skip-rounds", action="store_true")
    parser.add_argument("--skip-protocol", action="store_true")
    parser.add_argument("--child", nargs=5,
                        metavar=("DATASET", "CLIENTS", "CAP", "ROUNDS", "RUNTIME"))
    args = parser.parse_args(argv)

    if args.child:
        ds, k, cap, rounds, runtime = args.child
        if runtime == "local":  # Ray's own processes inherit limits badly: no limit there
            limit = int(args.mem_limit_gb * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        else:
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        print(json.dumps(protocol_child(ds, int(k), int(cap), int(rounds), runtime)))
        return 0

    import torch

    torch.set_num_threads(1)
    result: dict = {"machine": {"cpu_count": os.cpu_count(), "torch": torch.__version__,
                                "torch_threads": 1}}
    if not args.skip_rounds:
        result["round_time_cora"] = round_times("cora", args.rounds, args.local_steps)
        print(json.dumps(result["round_time_cora"]), file=sys.stderr, flush=True)
    result["protocol_pretrain"] = []
    for dataset in [] if args.skip_protocol else args.datasets:
        for k in args.clients:
            for cap in args.max_degrees:
                for runtime in ("local", "ray") if args.ray else ("local",):
                    res = run_child(args, dataset, k, cap, runtime)
                    print(json.dumps(res), file=sys.stderr, flush=True)
                    result["protocol_pretrain"].append(res)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
