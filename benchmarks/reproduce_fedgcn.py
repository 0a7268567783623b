"""Reproduce FedGCN (Yao et al.) Table 2 on Cora and CiteSeer.

For each dataset: the centralised GCN, and FedGCN 0/1/2-hop for Dirichlet β ∈ {1, 100, 10000},
10 clients, 300 rounds, 3 local steps, lr 0.5 (paper Appendix E.2). The metric is the paper's:
final-round test accuracy pooled over the clients' local test nodes, mean ± std over seeds.
The centralised model does not depend on β (one party owns every node), so it is run once per
dataset and shown under every β, as in the paper.

    FEDGL_DATA=../shared/data python benchmarks/reproduce_fedgcn.py --seeds 3

Prints the JSON of every cell and writes OUT/fedgcn_table2.{json,md}. Each finished cell is also
saved to OUT/fedgcn_table2.cells.json, so an interrupted run can continue with ``--resume``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

BETAS = (1.0, 100.0, 10000.0)
METHODS = ("centralized", "0-hop", "1-hop", "2-hop")

# Paper Table 2, mean test accuracy for β = 1 / 100 / 10000.
PAPER = {
    "cora": {"centralized": (0.8069, 0.8069, 0.8069), "0-hop": (0.6502, 0.5958, 0.5992),
             "1-hop": (0.8100, 0.8009, 0.8009), "2-hop": (0.8064, 0.8084, 0.8087)},
    "citeseer": {"centralized": (0.6914, 0.6914, 0.6914), "0-hop": (0.617, 0.5841, 0.5841),
                 "1-hop": (0.7006, 0.6891, 0.6930), "2-hop": (0.6933, 0.6953, 0.6948)},
}


def run_cell(dataset: str, method: str, beta: float, args: argparse.Namespace) -> dict:
    """Mean/std test accuracy over ``args.seeds`` seeds for one (dataset, method, β)."""
    import fedgl

    common = dict(dataset=dataset, clients=10, rounds=args.rounds, local_steps=3, lr=0.5,
                  repeats=args.seeds, seed=0, progress=False, oracle_eval=False,
                  threads=args.threads)
    if method == "centralized":
        r = fedgl.run(algorithm="centralized", beta=beta, **common)
    else:
        r = fedgl.run(algorithm="fedgcn", hops=int(method[0]), beta=beta, **common)
    acc = r.summary["test_acc"]
    return {"mean": acc["mean"], "std": acc["std"], "values": acc["values"],
            "seconds": sum(rep.seconds["total"] for rep in r.repeats)}


def reproduce(args: argparse.Namespace) -> dict:
    cache_path = args.out / "fedgcn_table2.cells.json"
    cache = json.loads(cache_path.read_text()) if args.resume and cache_path.is_file() else {}
    cells = []
    for dataset in args.datasets:
        for method in METHODS:
            for b, beta in enumerate(BETAS):
                # β only changes the split; the centralised party owns every node, so run it once.
                key = (f"{dataset}/{method}/beta={1.0 if method == 'centralized' else beta:g}"
                       f"/seeds={args.seeds}/rounds={args.rounds}")
                if key not in cache:
                    cache[key] = run_cell(dataset, method, beta, args)
                    cache_path.write_text(json.dumps(cache, indent=1) + "\n")
                    print(f"{key}: {cache[key]['mean']:.4f} ± {cache[key]['std']:.4f} "
                          f"({cache[key]['seconds']:.0f} s)", file=sys.stderr, flush=True)
                res = cache[key]
                paper = PAPER[dataset][method][b]
                cells.append({"dataset": dataset, "method": method, "beta": beta,
                              "mean": res["mean"], "std": res["std"], "values": res["values"],
                              "paper": paper, "gap": res["mean"] - paper})
    import torch

    return {"config": {"seeds": args.seeds, "rounds": args.rounds, "clients": 10,
                       "local_steps": 3, "lr": 0.5, "datasets": args.datasets},
            "machine": {"cpu_count": os.cpu_count(),
                        "torch_threads": args.threads or torch.get_num_threads(),
                        "platform": platform.platform(), "torch": torch.__version__},
            "cells": cells}


def markdown(result: dict) -> str:
    """One table per dataset: rows = methods, columns = β, each cell ours ± std | paper | gap."""
    lines = []
    for dataset in result["config"]["datasets"]:
        lines += [f"### {dataset} (test accuracy, {result['config']['seeds']} seeds)", "",
                  "| method | " + " | ".join(f"β={b:g}: ours | paper | gap" for b in BETAS) + " |",
                  "|---|" + "---:|---:|---:|" * len(BETAS)]
        for method in METHODS:
            row = [c for c in result["cells"] if c["dataset"] == dataset and c["method"] == method]
            parts = [f"{c['mean']:.4f} ± {c['std']:.4f} | {c['paper']:.4f} | {c['gap']:+.4f}"
                     for c in sorted(row, key=lambda c: c["beta"])]
            lines.append(f"| {method} | " + " | ".join(parts) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="repeats per cell (paper: 10)")
    parser.add_argument("--datasets", nargs="+", default=["cora", "citeseer"],
                        choices=sorted(PAPER), help="datasets to run")
    parser.add_argument("--rounds", type=int, default=300, help="communication rounds T")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out"), help="output folder")
    parser.add_argument("--resume", action="store_true",
                        help="reuse cells already saved in OUT/fedgcn_table2.cells.json")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads inside each run (fedgl's default 1; 0: torch's)")
    args = parser.parse_args(argv)

    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    result = reproduce(args)
    result["seconds"] = time.perf_counter() - t0
    text = json.dumps(result, indent=2)
    (args.out / "fedgcn_table2.json").write_text(text + "\n")
    (args.out / "fedgcn_table2.md").write_text(markdown(result))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
