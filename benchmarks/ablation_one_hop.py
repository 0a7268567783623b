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
import sys
import time
from functools import partial

from fedgcn_tables import CellCache, machine, paper_value, parser, run_config, run_table2, write_outputs

METHODS = ("1-hop eq33", "1-hop paper-code", "2-hop")


def run_cell(dataset: str, method: str, beta: float, args: argparse.Namespace) -> dict:
    hops = int(method[0])
    extra = {"one_hop_variant": method.split()[1]} if hops == 1 else {}
    r = run_table2(dataset, beta, args, algorithm="fedgcn", hops=hops, **extra)
    acc = r.summary["test_acc"]
    return {"mean": acc["mean"], "std": acc["std"], "values": acc["values"],
            "pretrain_bytes": r.summary["pretrain_bytes"]["values"][0],
            "seconds": sum(rep.seconds["total"] for rep in r.repeats),
            "peak_rss_mb": max(rep.peak_rss_mb for rep in r.repeats)}


def ablation(args: argparse.Namespace) -> dict:
    cache = CellCache(args.out / "fedgcn_one_hop_ablation.cells.json", args.resume)
    cells = []
    for dataset in args.datasets:
        for beta in args.betas:
            for method in METHODS:
                key = f"{dataset}/{method}/beta={beta:g}/seeds={args.seeds}/rounds={args.rounds}"
                res = cache.get(key, partial(run_cell, dataset, method, beta, args))
                # the paper's FedGCN (1-hop) value, beside every method
                cells.append({"dataset": dataset, "beta": beta, "method": method, **res,
                              "paper_one_hop": paper_value(dataset, "1-hop", beta)})
    return {"config": run_config(args, betas=args.betas), "machine": machine(args.threads),
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
    ap = parser(__doc__, ["cora", "citeseer"])
    ap.add_argument("--betas", nargs="+", type=float, default=[1.0, 10000.0])
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    return write_outputs(ablation(args), args.out, "fedgcn_one_hop_ablation", markdown, t0)


if __name__ == "__main__":
    sys.exit(main())
