"""FedGCN 1-hop ablation: the paper's eq. (33) against the released code's variant (and 2-hop).

Same settings as benchmarks/reproduce_fedgcn.py (paper Appendix E.2: 10 clients, 300 rounds,
3 local steps, lr 0.5, Dirichlet β), for ``--one-hop-variant eq33`` and ``paper-code``, beside
FedGCN 2-hop and the paper's Table 2 1-hop value. Also records each cell's pre-training bytes
(ledger, up + down, first seed) so accuracy and cost sit side by side.

    FEDGL_DATA=../shared/data python benchmarks/ablation_one_hop.py --seeds 3

Prints the JSON of every cell and writes OUT/fedgcn_one_hop_ablation.{json,md}; finished cells
are cached in OUT/fedgcn_one_hop_ablation.cells.json (``--resume`` continues from it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

METHODS = ("1-hop eq33", "1-hop paper-code", "2-hop")
# Paper Table 2, FedGCN (1-hop) mean test accuracy for β = 1 / 100 / 10000.
PAPER_ONE_HOP = {"cora": {1.0: 0.8100, 100.0: 0.8009, 10000.0: 0.8009},
                 "citeseer": {1.0: 0.7006, 100.0: 0.6891, 10000.0: 0.6930}}


def run_cell(dataset: str, method: str, beta: float, args: argparse.Namespace) -> dict:
    import fedgl

    hops = int(method[0])
    extra = {"one_hop_variant": method.split()[1]} if hops == 1 else {}
    r = fedgl.run(algorithm="fedgcn", dataset=dataset, clients=10, rounds=args.rounds,
                  local_steps=3, lr=0.5, beta=beta, repeats=args.seeds, seed=0, hops=hops,
                  progress=False, oracle_eval=False, threads=args.threads, **extra)
    acc = r.summary["test_acc"]
    return {"mean": acc["mean"], "std": acc["std"], "values": acc["values"],
            "pretrain_bytes": r.summary["pretrain_bytes"]["values"][0],
            "seconds": sum(rep.seconds["total"] for rep in r.repeats),
            "peak_rss_mb": max(rep.peak_rss_mb for rep in r.repeats)}


def ablation(args: argparse.Namespace) -> dict:
    cache_path = args.out / "fedgcn_one_hop_ablation.cells.json"
    cache = json.loads(cache_path.read_text()) if args.resume and cache_path.is_file() else {}
    cells = []
    for dataset in args.datasets:
        for beta in args.betas:
            for method in METHODS:
                key = f"{dataset}/{method}/beta={beta:g}/seeds={args.seeds}/rounds={args.rounds}"
                if key not in cache:
                    cache[key] = run_cell(dataset, method, beta, args)
                    cache_path.write_text(json.dumps(cache, indent=1) + "\n")
                    print(f"{key}: {cache[key]['mean']:.4f} ± {cache[key]['std']:.4f} "
                          f"({cache[key]['seconds']:.0f} s)", file=sys.stderr, flush=True)
                cells.append({"dataset": dataset, "beta": beta, "method": method, **cache[key],
                              "paper_one_hop": PAPER_ONE_HOP[dataset].get(beta)})
    import torch

    return {"config": {"seeds": args.seeds, "rounds": args.rounds, "clients": 10,
                       "local_steps": 3, "lr": 0.5, "datasets": args.datasets,
                       "betas": args.betas},
            "machine": {"cpu_count": os.cpu_count(), "torch_threads": args.threads,
                        "platform": platform.platform(), "torch": torch.__version__},
            "cells": cells}


def markdown(result: dict) -> str:
    lines = ["| dataset | β | method | test acc (mean ± std) | paper 1-hop | gap to paper 1-hop "
             "| pre-training MB |", "|---|---:|---|---:|---:|---:|---:|"]
    for c in result["cells"]:
        paper = c["paper_one_hop"]
        gap = f"{c['mean'] - paper:+.4f}" if paper is not None else ""
        lines.append(f"| {c['dataset']} | {c['beta']:g} | {c['method']} | {c['mean']:.4f} ± "
                     f"{c['std']:.4f} | {paper if paper is not None else ''} | {gap} | "
                     f"{c['pretrain_bytes'] / 1e6:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="repeats per cell (paper: 10)")
    parser.add_argument("--datasets", nargs="+", default=["cora", "citeseer"],
                        choices=sorted(PAPER_ONE_HOP))
    parser.add_argument("--betas", nargs="+", type=float, default=[1.0, 10000.0])
    parser.add_argument("--rounds", type=int, default=300, help="communication rounds T")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out"), help="output folder")
    parser.add_argument("--resume", action="store_true", help="reuse cached cells")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    result = ablation(args)
    result["seconds"] = time.perf_counter() - t0
    text = json.dumps(result, indent=2)
    (args.out / "fedgcn_one_hop_ablation.json").write_text(text + "\n")
    (args.out / "fedgcn_one_hop_ablation.md").write_text(markdown(result))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
