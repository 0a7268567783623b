"""Wall-time of a FedGCN round against the centralised gradient steps it replaces.

Measures, in one process and one after another (never in parallel):

(a) FedGCN 2-hop on Cora, 10 clients, E=3, β=10000: train-phase seconds per round (from the
    ledger), total, and the pre-training round's seconds and bytes — with the in-process
    clients batched into one computation (the default) and one after the other;
(b) a centralised GCN taking the same ``rounds x 3`` gradient steps, (i) via
    ``fedgl.run(algorithm='centralized')`` (receptive-field restriction, like the clients) and
    (ii) a plain full-batch PyG-style loop on the whole graph, as seconds per 3 steps;
(c) the ratios federated round / centralised 3 steps for (i) and (ii);
(d) the total wall time of a Cora FedGCN 2-hop run with per-round evaluation and oracle scoring,
    via ``fedgl.run`` and via the CLI (``python -m fedgl.cli run``, a fresh interpreter).

    FEDGL_DATA=../shared/data python benchmarks/perf_fedgcn.py [--rounds 300] [--profile 15]

``--profile N`` also prints the top N functions (cumulative time) of a cProfile of the
federated run (a) to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

SETTINGS = dict(dataset="cora", clients=10, local_steps=3, lr=0.5, beta=10000.0, repeats=1,
                seed=0, progress=False, threads=1)  # threads: set from --threads in main()


def federated(rounds: int, batch_clients: bool = True) -> dict:
    """(a): FedGCN 2-hop, evaluation only at the last round, no oracle; the in-process clients
    batched into one computation (the default) or one after the other."""
    import fedgl

    r = fedgl.run(algorithm="fedgcn", hops=2, rounds=rounds, eval_every=rounds, oracle_eval=False,
                  batch_clients=batch_clients, **SETTINGS)
    rep = r.repeats[0]
    pre = rep.ledger["bytes"]["pretrain"]
    return {"train_seconds": rep.seconds["train"], "seconds_per_round": rep.seconds["train"] / rounds,
            "total_seconds": rep.seconds["total"], "pretrain_seconds": rep.seconds["pretrain"],
            "pretrain_bytes_up": pre["up"], "pretrain_bytes_down": pre["down"],
            "test_acc": r.summary["test_acc"]["mean"]}


def centralized_fedgl(rounds: int) -> dict:
    """(b)(i): ``algorithm='centralized'``; its ledger times ``local_steps`` steps per round."""
    import fedgl

    r = fedgl.run(algorithm="centralized", rounds=rounds, eval_every=rounds, oracle_eval=False,
                  **SETTINGS)
    rep = r.repeats[0]
    return {"train_seconds": rep.seconds["train"], "seconds_per_3_steps": rep.seconds["train"] / rounds,
            "test_acc": r.summary["test_acc"]["mean"]}


def centralized_plain(rounds: int, steps_per_round: int = 3) -> dict:
    """(b)(ii): full-batch GCN on the whole graph, SGD lr 0.5 wd 5e-4, NLL on the train mask."""
    import torch
    import torch.nn.functional as F

    from fedgl.api import as_config, load_graph
    from fedgl.models import GCN, gcn_edge_weights

    graph = load_graph(as_config(**SETTINGS))
    ei, w = gcn_edge_weights(graph.edge_index, graph.num_nodes, graph.degrees() + 1)
    torch.manual_seed(0)
    model = GCN(graph.num_features, 16, graph.num_classes, layers=2, dropout=0.5)
    opt = torch.optim.SGD(model.parameters(), lr=0.5, weight_decay=5e-4)
    x, y, mask = graph.x, graph.y, graph.train_mask
    model.train()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        F.nll_loss(model(x, ei, w)[mask], y[mask]).backward()
        opt.step()

    for _ in range(5):  # warm-up
        step()
    t0 = time.perf_counter()
    for _ in range(rounds * steps_per_round):
        step()
    seconds = time.perf_counter() - t0
    return {"train_seconds": seconds, "seconds_per_3_steps": seconds / rounds}


def end_to_end(rounds: int) -> dict:
    """(d): default evaluation every round plus oracle scoring, via the API and via the CLI."""
    import fedgl

    t0 = time.perf_counter()
    r = fedgl.run(algorithm="fedgcn", hops=2, rounds=rounds, oracle_eval=True, **SETTINGS)
    api_seconds = time.perf_counter() - t0
    flags = ["--algorithm", "fedgcn", "--hops", "2", "--rounds", str(rounds), "--oracle-eval",
             "--no-progress"]
    for key, value in SETTINGS.items():
        if key != "progress":
            flags += ["--" + key.replace("_", "-"), str(value)]
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "fedgl.cli", "run", *flags, "--out", tmp]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        cli_seconds = time.perf_counter() - t0
    return {"api_seconds": api_seconds, "api_phase_seconds": r.repeats[0].seconds,
            "cli_seconds": cli_seconds, "cli_command": " ".join(["python", *cmd[1:-2]])}


def profile(rounds: int, top: int) -> None:
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.runcall(federated, rounds)
    pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(top)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300, help="communication rounds T")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="print the top N cProfile entries of run (a) to stderr")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads for every measurement (fedgl's default 1; "
                             "0: torch's default)")
    args = parser.parse_args(argv)

    import torch

    SETTINGS["threads"] = args.threads
    if args.threads:
        torch.set_num_threads(args.threads)

    load = os.getloadavg()  # other processes on the machine distort every timing below
    federated(2)  # warm-up: imports, dataset parsing, lazy initialisation
    fed = federated(args.rounds)
    fed_one_by_one = federated(args.rounds, batch_clients=False)
    cen = centralized_fedgl(args.rounds)
    plain = centralized_plain(args.rounds)
    out = {
        "rounds": args.rounds, "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__, "load_average_at_start": load,
        "a_fedgcn_2hop": fed,
        "a_fedgcn_2hop_one_by_one": fed_one_by_one,
        "b_i_centralized_fedgl": cen,
        "b_ii_centralized_plain_full_batch": plain,
        "c_ratio_round_vs_3_steps": {
            "vs_fedgl_centralized": fed["seconds_per_round"] / cen["seconds_per_3_steps"],
            "vs_plain_full_batch": fed["seconds_per_round"] / plain["seconds_per_3_steps"],
            "one_by_one_vs_fedgl_centralized":
                fed_one_by_one["seconds_per_round"] / cen["seconds_per_3_steps"]},
        "d_end_to_end": end_to_end(args.rounds),
    }
    print(json.dumps(out, indent=2))
    if args.profile:
        profile(args.rounds, args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
