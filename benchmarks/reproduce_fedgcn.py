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
import sys
import time
from functools import partial

from fedgcn_tables import BETAS, PAPER, CellCache, machine, parser, run_config, run_table2, write_outputs

METHODS = ("centralized", "0-hop", "1-hop", "2-hop")


def run_cell(dataset: str, method: str, beta: float, args: argparse.Namespace) -> dict:
    """Mean/std test accuracy over ``args.seeds`` seeds for one (dataset, method, β)."""
    if method == "centralized":
        r = run_table2(dataset, beta, args, algorithm="centralized")
    else:
        r = run_table2(dataset, beta, args, algorithm="fedgcn", hops=int(method[0]))
    acc = r.summary["test_acc"]
    return {"mean": acc["mean"], "std": acc["std"], "values": acc["values"],
            "seconds": sum(rep.seconds["total"] for rep in r.repeats)}


def reproduce(args: argparse.Namespace) -> dict:
    cache = CellCache(args.out / "fedgcn_table2.cells.json", args.resume)
    cells = []
    for dataset in args.datasets:
        for method in METHODS:
            for b, beta in enumerate(BETAS):
                # β only changes the split; the centralised party owns every node, so run it once.
                key = (f"{dataset}/{method}/beta={1.0 if method == 'centralized' else beta:g}"
                       f"/seeds={args.seeds}/rounds={args.rounds}")
                res = cache.get(key, partial(run_cell, dataset, method, beta, args))
                paper = PAPER[dataset][method][b]
                cells.append({"dataset": dataset, "method": method, "beta": beta,
                              "mean": res["mean"], "std": res["std"], "values": res["values"],
                              "paper": paper, "gap": res["mean"] - paper})
    return {"config": run_config(args), "machine": machine(args.threads), "cells": cells}


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
    args = parser(__doc__, ["cora", "citeseer"]).parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    return write_outputs(reproduce(args), args.out, "fedgcn_table2", markdown, t0)


if __name__ == "__main__":
    sys.exit(main())
