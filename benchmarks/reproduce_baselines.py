"""Reproduce the baseline rows of FedGCN (Yao et al.) Table 2 and the Figure 4 trade-off.

Table 2: BDS-GCN (``bns-gcn``) and FedSage+ beside FedGCN 0/1/2-hop (ours) on Cora and CiteSeer,
Dirichlet β ∈ {1, 100, 10000}, 10 clients, 300 rounds, 3 local steps, lr 0.5 (Appendix E.2);
metric: final-round test accuracy pooled over the clients' local test nodes, mean ± std over
seeds. Figure 4: on Cora (β = 10000 by default) the same methods plus Distributed GCN, test
accuracy against the bytes communicated until convergence (first evaluated round reaching 99 %
of the run's best test accuracy; bytes = pre-training bytes + that share of the training bytes,
exact for methods whose per-round cost is constant, the mean per round for BNS-GCN).

FedSage+ runs with the reference defaults except: the generator trains full-batch (20 steps, not
batches of 32) with ``gen_hidden`` 256 (reference 2048) and one other client scoring each
generator per step (``cross_clients 1``), to fit this benchmark's time budget; see
docs/reproduction-baselines.md. ``fedsage-exact`` is FedSage+ with ``mend exact``: the true
features of up to ``num_pred`` cross-client neighbours per node instead of NeighGen's, the
perfect generator the paper's Table 2 caption assumes for its FedSage+ row.

    FEDGL_DATA=../shared/data python benchmarks/reproduce_baselines.py --seeds 3 --out OUT

    python benchmarks/reproduce_baselines.py --from-sweep runs/table2-beta100 --betas 100 --out OUT

(the second tables a ``fedgl sweep`` of benchmarks/sweeps/table2_beta100.yaml beside the paper;
with ``--merge OLD`` the sweep's cells are pooled seed by seed with the cells of an earlier
``--out OLD`` run, e.g. seeds 0–2 from that run and 3–9 from the sweep, and a seed both ran must
agree).
Prints one JSON line per finished cell; OUT/baselines.cells.json holds them (``--resume``
continues an interrupted run), OUT/baselines_table2.md the table, OUT/figure4_cora.png the plot.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import time
from pathlib import Path

BETAS = (1.0, 100.0, 10000.0)
TABLE_METHODS = ("bns-gcn", "fedsage-plus", "fedsage-exact", "fedgcn-0", "fedgcn-1", "fedgcn-2")
FIGURE_METHODS = ("distributed-gcn", "bns-gcn", "fedsage-plus", "fedsage-exact", "fedgcn-0",
                  "fedgcn-1", "fedgcn-2")

# FedGCN paper Table 2 (mean test accuracy, β = 1 / 100 / 10000).
PAPER = {
    "cora": {"bns-gcn": (0.7598, 0.7467, 0.7479), "fedsage-plus": (0.8026, 0.7942, 0.796),
             "fedsage-exact": (0.8026, 0.7942, 0.796),
             "fedgcn-0": (0.6502, 0.5958, 0.5992), "fedgcn-1": (0.8100, 0.8009, 0.8009),
             "fedgcn-2": (0.8064, 0.8084, 0.8087)},
    "citeseer": {"bns-gcn": (0.6709, 0.6596, 0.6582), "fedsage-plus": (0.6977, 0.6856, 0.688),
                 "fedsage-exact": (0.6977, 0.6856, 0.688),
                 "fedgcn-0": (0.617, 0.5841, 0.5841), "fedgcn-1": (0.7006, 0.6891, 0.6930),
                 "fedgcn-2": (0.6933, 0.6953, 0.6948)},
}
LABELS = {"bns-gcn": "BDS-GCN (ρ=0.1)", "fedsage-plus": "FedSage+",
          "fedsage-exact": "FedSage+, exact mend", "fedgcn-0": "FedGCN 0-hop",
          "fedgcn-1": "FedGCN 1-hop", "fedgcn-2": "FedGCN 2-hop",
          "distributed-gcn": "Distributed GCN"}
FEDSAGE = {"gen_batch_size": 0, "gen_hidden": 256, "cross_clients": 1}


def method_config(method: str) -> dict:
    if method.startswith("fedgcn-"):
        return {"algorithm": "fedgcn", "hops": int(method[-1])}
    if method == "fedsage-plus":
        return {"algorithm": "fedsage-plus", **FEDSAGE}
    if method == "fedsage-exact":
        return {"algorithm": "fedsage-plus", "mend": "exact"}
    return {"algorithm": method}


def run_cell(dataset: str, method: str, beta: float, args: argparse.Namespace) -> dict:
    import fedgl
    from fedgl.report import bytes_to_convergence

    t0 = time.perf_counter()
    seeds = args.figure_seeds if method == "distributed-gcn" and args.figure_seeds else args.seeds
    r = fedgl.run(dataset=dataset, clients=10, rounds=args.rounds, local_steps=3, lr=0.5,
                  beta=beta, repeats=seeds, seed=0, progress=False, oracle_eval=False,
                  eval_every=args.eval_every, threads=1, **method_config(method))
    acc = r.summary["test_acc"]
    conv = [bytes_to_convergence(rep.history, rep.final) for rep in r.repeats]
    return {"dataset": dataset, "method": method, "beta": beta, "mean": acc["mean"],
            "std": acc["std"], "values": acc["values"],
            "total_bytes": statistics.fmean(rep.final["pretrain_bytes"] + rep.final["train_bytes"]
                                            for rep in r.repeats),
            "convergence_round": statistics.fmean(c[0] for c in conv),
            "bytes_to_convergence": statistics.fmean(c[1] for c in conv),
            "seconds": time.perf_counter() - t0,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}


def table(cells: dict, datasets: list[str], betas: list[float], seeds: int) -> str:
    lines = [f"Test accuracy, 10 clients, {seeds} seeds unless a cell says (n) (ours: mean ± "
             "std; paper: mean; ratio = ours / paper).", ""]
    for ds in datasets:
        lines += [f"### {ds}", "", "| method | " + " | ".join(f"β={b:g} ours | paper | ratio"
                                                            for b in betas) + " |",
                  "|---|" + "---|---|---|" * len(betas)]
        for m in TABLE_METHODS:
            row = [LABELS[m]]
            for b in betas:
                c = cells.get(f"{ds}|{m}|{b:g}")
                paper = PAPER[ds][m][BETAS.index(b)] if b in BETAS else math.nan
                if c is None:
                    row += ["—", f"{paper:.4f}", "—"]
                else:
                    n = len(c.get("values") or [])
                    tag = f" ({n})" if n and n != seeds else ""
                    row += [f"{c['mean']:.4f} ± {c['std']:.4f}{tag}", f"{paper:.4f}",
                            f"{c['mean'] / paper:.3f}"]
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    return "\n".join(lines)


def figure(cells: dict, dataset: str, beta: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    for m in FIGURE_METHODS:
        c = cells.get(f"{dataset}|{m}|{beta:g}")
        if c is None:
            continue
        x = max(c["bytes_to_convergence"], 1.0)
        ax.scatter([x], [c["mean"]], s=60, label=LABELS[m])
        ax.errorbar([x], [c["mean"]], yerr=[c["std"]], fmt="none", ecolor="gray")
    ax.set_xscale("log")
    ax.set_xlabel("bytes communicated until convergence (log scale)")
    ax.set_ylabel("test accuracy")
    ax.set_title(f"{dataset}, 10 clients, β={beta:g}: accuracy vs communication")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def cells_from_sweep(folder: str) -> dict:
    """This script's cells (``dataset|method|β``) from a ``fedgl sweep`` folder, through
    ``fedgl.report`` (seeds pooled; the same numbers ``fedgl report`` tables)."""
    from fedgl.report import group_entries, load_entries

    cells = {}
    for g in group_entries(load_entries(folder)):
        cfg, m = g["config"], g["metrics"]
        algo = cfg["algorithm"]
        method = f"fedgcn-{cfg['hops']}" if algo == "fedgcn" else algo
        acc = m["test_acc"]
        cells[f"{cfg['dataset']}|{method}|{cfg['beta']:g}"] = {
            "dataset": cfg["dataset"], "method": method, "beta": cfg["beta"],
            "mean": acc["mean"], "std": acc["std"], "values": acc["values"],
            "seeds": len(acc["values"]), "seed_ids": [rep["seed"] for rep in g["repeats"]],
            "convergence_round": m["convergence_round"]["mean"],
            "bytes_to_convergence": m["bytes_to_convergence"]["mean"],
            "total_bytes": m["total_bytes"]["mean"]}
    return cells


def pool_seeds(old: dict, new: dict) -> dict:
    """One cell from two runs of the same setting, seed by seed: ``new`` (a sweep cell, which
    names its seeds) plus the seeds of ``old`` it lacks (a cell of :func:`run_cell` holds seeds
    0 … n−1). Test accuracy mean ± (population) std over the union; a seed in both must give the
    same accuracy, else it is listed under ``seed_mismatch`` (``new``'s value kept). The bytes
    and rounds stay ``new``'s (its seeds only)."""
    ours = dict(zip(new["seed_ids"], new["values"], strict=True))
    theirs = dict(zip(old.get("seed_ids") or range(len(old["values"])), old["values"],
                      strict=True))
    mismatch = {str(s): [theirs[s], v] for s, v in ours.items()
                if s in theirs and abs(theirs[s] - v) > 1e-9}
    merged = {**theirs, **ours}
    seeds = sorted(merged)
    vals = [merged[s] for s in seeds]
    return {**new, "mean": statistics.fmean(vals),
            "std": statistics.pstdev(vals) if len(vals) > 1 else 0.0, "values": vals,
            "seeds": len(vals), "seed_ids": seeds,
            "seeds_from_sweep": sorted(ours), "seed_mismatch": mismatch}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", default="cora,citeseer")
    ap.add_argument("--betas", default="1,100,10000")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--figure-beta", type=float, default=10000.0)
    ap.add_argument("--methods", default=",".join(FIGURE_METHODS))
    ap.add_argument("--figure-seeds", type=int, default=0,
                    help="seeds of the Distributed GCN cell (0: --seeds)")
    ap.add_argument("--merge", default="", help="also read the cells stored in these folders "
                                                "(comma-separated), e.g. another process's --out")
    ap.add_argument("--collect-only", action="store_true",
                    help="run nothing; write the table and figure from the stored cells")
    ap.add_argument("--from-sweep", default="", help="run nothing; table the cells of these "
                                                     "fedgl sweep folders (comma-separated), "
                                                     "pooled seed by seed with --merge's cells")
    ap.add_argument("--out", default="runs/reproduce-baselines")
    ap.add_argument("--resume", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    store = out / "baselines.cells.json"
    cells = json.loads(store.read_text()) if args.resume and store.exists() else {}
    for other in filter(None, args.merge.split(",")):
        cells.update(json.loads((Path(other) / "baselines.cells.json").read_text()))
    if args.from_sweep:
        for folder in args.from_sweep.split(","):
            for key, cell in cells_from_sweep(folder).items():
                cells[key] = pool_seeds(cells[key], cell) if key in cells else cell
                if cells[key].get("seed_mismatch"):
                    print(json.dumps({"seed_mismatch": key, **cells[key]["seed_mismatch"]}))
        args.collect_only = True
    datasets = args.datasets.split(",")
    betas = [float(b) for b in args.betas.split(",")]
    methods = args.methods.split(",")
    todo = [(ds, m, b) for ds in datasets for b in betas for m in methods
            if m in TABLE_METHODS or (ds == "cora" and b == args.figure_beta)]
    for ds, m, b in todo:
        key = f"{ds}|{m}|{b:g}"
        if key in cells or args.collect_only:
            continue
        cells[key] = run_cell(ds, m, b, args)
        print(json.dumps(cells[key]), flush=True)
        store.write_text(json.dumps(cells, indent=1))
    store.write_text(json.dumps(cells, indent=1))
    (out / "baselines_table2.md").write_text(table(cells, datasets, betas, args.seeds))
    if "cora" in datasets and not args.from_sweep:
        figure(cells, "cora", args.figure_beta, out / "figure4_cora.png")
    print(json.dumps({"table": str(out / "baselines_table2.md"), "cells": len(cells)}))


if __name__ == "__main__":
    main()
