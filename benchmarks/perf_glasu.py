"""GLASU speed, communication and memory: seconds per model update against the centralised
step on the same batches, bytes and messages per update for K = 4, 2, 1 and Q = 1, 4, and each
configuration's peak resident memory (each configuration runs in its own process).

Cora, M = 3, GCNII, L = 4, hidden 64, batch 16, 3 neighbours per node, in-process clients (LocalRuntime, the
clients' calls stacked into one computation where supported — ``batch_clients``; the
"one by one" row turns that off), one thread. The centralised party (M = 1, every column and
edge) and GLASU draw the same batches (the same seeded server generator over the same training
ids); the sampled sets differ (GLASU's are unions of the clients' samples at aggregation layers,
so larger): ``client0_nodes_per_layer`` is client 0's mean ``|S[l]|``, l = 0..L. Times exclude
evaluation. Wall seconds and the process's CPU seconds are both reported: on a shared machine
the CPU time is the steadier measure of the work a step does. ``interleaved()`` times chosen
configurations round by round in one process, so that load changes hit them alike.

    FEDGL_DATA=../shared/data python benchmarks/perf_glasu.py --rounds 40

Prints JSON (one entry per configuration plus ratios to the centralised step).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

CONFIGS = [  # (name, clients, K, Q, grad_mode, full edges[, batched: default True])
    ("centralized", 1, "4", 1, "exact", True),
    ("glasu K=4 Q=1 exact", 3, "4", 1, "exact", False),
    ("glasu K=4 Q=1", 3, "4", 1, "local_stale", False),
    ("glasu K=2 Q=1", 3, "2", 1, "local_stale", False),
    ("glasu K=1 Q=1", 3, "1", 1, "local_stale", False),
    ("glasu K=4 Q=4", 3, "4", 4, "local_stale", False),
    ("glasu K=2 Q=4", 3, "2", 4, "local_stale", False),
    ("glasu K=1 Q=4", 3, "1", 4, "local_stale", False),
    ("glasu K=4 Q=1 one by one", 3, "4", 1, "local_stale", False, False),
]


def build(index: int, graph):  # noqa: ANN001, ANN201 - the server of configuration ``index``
    from fedgl.algorithms.glasu.client import GlasuClient
    from fedgl.algorithms.glasu.options import GlasuParams, agg_layer_set
    from fedgl.algorithms.glasu.runner import SelfRuntime
    from fedgl.algorithms.glasu.server import GlasuServer
    from fedgl.data.vertical import vertical_split
    from fedgl.federation.runtime import LocalRuntime

    name, clients, k, q, mode, full, *rest = CONFIGS[index]
    batch = rest[0] if rest else True
    p = GlasuParams(clients=clients, layers=4, hidden=64, num_classes=graph.num_classes,
                    agg=agg_layer_set(k, 4), stale_steps=q, grad_mode=mode, backbone="gcnii",
                    dropout=0.5, lr=0.01, optimizer="adam", batch_size=16, fanout=3)
    parts = vertical_split(graph, clients, seed=0, full_edges=full)
    runtime = (SelfRuntime(GlasuClient(parts[0], p, 0)) if clients == 1 else
               LocalRuntime({d.client_id: GlasuClient(d, p, 0) for d in parts}, batch=batch))
    server = GlasuServer(runtime, p, 0)
    server.setup()
    return server


def interleaved(indices: list[int], rounds: int, dataset: str) -> dict:
    """Configurations ``indices`` in one process, one round each in turn, so that a changing
    machine load hits them alike; seconds per update of each."""
    import torch

    from fedgl.data.datasets import load_dataset

    torch.set_num_threads(1)
    graph = load_dataset(dataset)
    servers = [build(i, graph) for i in indices]
    for s in servers:
        s.train_round()
    spent, cpu = [0.0] * len(servers), [0.0] * len(servers)
    for _ in range(rounds):
        for j, s in enumerate(servers):
            t0, c0 = time.perf_counter(), time.process_time()
            s.train_round()
            spent[j] += time.perf_counter() - t0
            cpu[j] += time.process_time() - c0
    per = [spent[j] / (rounds * CONFIGS[i][3]) for j, i in enumerate(indices)]
    per_cpu = [cpu[j] / (rounds * CONFIGS[i][3]) for j, i in enumerate(indices)]
    return {"interleaved": [CONFIGS[i][0] for i in indices], "seconds_per_update": per,
            "time_vs_first": [v / per[0] for v in per], "cpu_seconds_per_update": per_cpu,
            "cpu_time_vs_first": [v / per_cpu[0] for v in per_cpu]}


def one(index: int, rounds: int, dataset: str) -> dict:
    import torch

    from fedgl.data.datasets import load_dataset

    torch.set_num_threads(1)
    name, clients, k, q, mode, *_ = CONFIGS[index]
    server = build(index, load_dataset(dataset))
    runtime = server.runtime
    server.train_round()  # warm-up (allocations, first-call overheads)
    led0 = (runtime.ledger.bytes("train"), runtime.ledger.messages("train"))
    t0, c0 = time.perf_counter(), time.process_time()
    sizes = [0] * 5
    for _ in range(rounds):
        server.train_round()
        sets = runtime.local_client(0).sets  # (reading it costs no time inside the loop above)
        sizes = [a + sets[i].numel() for i, a in enumerate(sizes)]
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    updates = rounds * q
    return {"name": name, "clients": clients, "K": k, "Q": q, "grad_mode": mode,
            "seconds_per_update": seconds / updates, "seconds_per_round": seconds / rounds,
            "cpu_seconds_per_update": cpu / updates,
            "bytes_per_update": (runtime.ledger.bytes("train") - led0[0]) / updates,
            "messages_per_update": (runtime.ledger.messages("train") - led0[1]) / updates,
            "client0_nodes_per_layer": [round(v / rounds, 1) for v in sizes],
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--dataset", default="cora")
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--interleave", default="0,2,8,1",
                    help="also time these configurations round by round in one process "
                         "(indices into CONFIGS; the first is the reference)")
    ap.add_argument("--interleave-only", action="store_true",
                    help="only the interleaved timing (no per-configuration processes)")
    args = ap.parse_args(argv)
    if args.one is not None:
        print(json.dumps(one(args.one, args.rounds, args.dataset)))
        return {}
    rows = []
    for i in ([] if args.interleave_only else range(len(CONFIGS))):
        out = subprocess.run([sys.executable, __file__, "--one", str(i), "--rounds",
                              str(args.rounds), "--dataset", args.dataset],
                             capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    central = rows[0]["seconds_per_update"] if rows else 1.0
    base = next((r for r in rows if r["name"] == "glasu K=4 Q=1"), None)
    for r in rows if base else []:
        r["time_vs_centralized"] = r["seconds_per_update"] / central
        if r["clients"] > 1:
            r["bytes_saving_vs_K4_Q1"] = base["bytes_per_update"] / r["bytes_per_update"]
            r["message_saving_vs_K4_Q1"] = base["messages_per_update"] / r["messages_per_update"]
    result = {"dataset": args.dataset, "rounds": args.rounds, "rows": rows}
    if args.interleave:
        result["interleaved"] = interleaved([int(i) for i in args.interleave.split(",")],
                                            args.rounds, args.dataset)
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
