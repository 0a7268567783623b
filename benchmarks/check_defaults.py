"""Every registered algorithm on Cora with its own defaults (its paper's recipe), as
``fedgl run --algorithm X --dataset cora --seed S`` runs it, and optionally the same run with
the values every algorithm got before per-algorithm defaults existed (FedGCN's recipe for all:
GCN, 16 hidden, dropout 0.5, SGD/Adam at lr 0.5, full batch, all neighbours, 300 rounds, a
Dirichlet split, raw features; GLASU's client optimiser SGD).

    FEDGL_DATA=../shared/data python benchmarks/check_defaults.py --seeds 0 --out defaults.json
    FEDGL_DATA=../shared/data python benchmarks/check_defaults.py --cut --seeds 0,1,2 --old

``--cut`` runs the shortened budgets of tests/test_defaults_cora.py (rounds, and FedSage+'s
generator steps; the rest of the recipe unchanged, evaluation at the last round); ``--old``
adds the control rows. One JSON line per run (algorithm, seed, rounds, final and
validation-selected test accuracy, wall seconds); ``--out`` also writes them all to a file.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

#: rounds of the fast default-run tests (tests/test_algorithm_defaults.py)
CUT_ROUNDS = {
    "fedgcn": 30, "centralized": 30, "bns-gcn": 30, "distributed-gcn": 30, "fedsage-plus": 30,
    "fedgat": 20, "distgat": 20, "centralized-gat": 20,
    "swift-fedgnn": 60, "fedgnn-g": 60, "local-only": 60, "llcg": 60, "fedgnn-pns": 60,
    "glasu": 40, "glasu-simulated": 160, "glasu-centralized": 160, "glasu-standalone": 160,
}

#: further cuts of the fast tests (FedSage+'s generator steps)
CUT_EXTRA = {"fedsage-plus": {"gen_epochs": 2}}

#: the common defaults every algorithm had before per-algorithm defaults (FedGCN's)
OLD_COMMON = {"clients": 10, "partition": "dirichlet", "beta": 1.0, "model": "gcn", "layers": 2,
              "hidden": 16, "dropout": 0.5, "lr": 0.5, "weight_decay": 5e-4, "rounds": 300,
              "local_steps": 3, "batch_size": 0, "num_neighbors": "",
              "normalize_features": False, "eval_every": 1}
OLD_OPTIONS = {"glasu_optimizer": "sgd"}


def old_values(algorithm: str) -> dict:
    """The pre-change values of the keys ``algorithm`` reads."""
    from fedgl.config import get_spec

    spec = get_spec(algorithm)
    skip = set(spec.unread_keys())
    out = {k: v for k, v in OLD_COMMON.items() if k not in skip}
    out.update({k: v for k, v in OLD_OPTIONS.items() if k in spec.option_names()})
    return out


def run_one(algorithm: str, seed: int, *, cut: bool, old: bool) -> dict:
    import fedgl

    cfg: dict = {"algorithm": algorithm, "dataset": "cora", "seed": seed, "progress": False}
    if old:
        cfg.update(old_values(algorithm))
    if cut:
        cfg.update(rounds=CUT_ROUNDS[algorithm], eval_every=CUT_ROUNDS[algorithm],
                   **CUT_EXTRA.get(algorithm, {}))
    t0 = time.perf_counter()
    result = fedgl.run(cfg)
    return {"algorithm": algorithm, "seed": seed, "defaults": "old" if old else "own",
            "rounds": result.config["rounds"], "test_acc": round(result.mean("test_acc"), 4),
            "selected_test_acc": round(result.mean("selected_test_acc"), 4),
            "seconds": round(time.perf_counter() - t0, 1)}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algorithms", default=",".join(CUT_ROUNDS))
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--cut", action="store_true", help="the fast tests' rounds")
    ap.add_argument("--old", action="store_true", help="also run with the old common defaults")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    rows = []
    for algorithm in args.algorithms.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            for old in ((False, True) if args.old else (False,)):
                row = run_one(algorithm, seed, cut=args.cut, old=old)
                print(json.dumps(row), flush=True)
                rows.append(row)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
