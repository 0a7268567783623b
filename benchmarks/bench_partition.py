"""Time and peak memory of the Dirichlet split on the arxiv-sized labels: the vectorised draw
against the original per-client loop (kept as the reference in tests/test_partition_dirichlet.py).

    python benchmarks/bench_partition.py                       # every case below, each in a fresh process
    python benchmarks/bench_partition.py --impl old --clients 10000 --max-draws 20

The labels are those of ``synthetic:arxiv`` at seed 0 (169,343 nodes, 40 classes; the
generator's first draw, so no graph is built). Each case prints one JSON line: the implementation,
clients, β, minimum size, the outcome (``ok`` or the error), seconds, draws made (old loop only:
it has no counter, so it is run with ``--max-draws``) and the process's RSS after the imports and
at its peak.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

CASES = [
    # implementation, clients, min size, max draws of the old loop
    ("old", 10, 10, 1000),
    ("new", 10, 10, 1000),
    ("old", 10_000, 10, 5),      # the request: 1,000 draws, ~17 min; timed over 5
    ("new", 10_000, 10, 1000),
    ("old", 10_000, 5, 1000),
    ("new", 10_000, 5, 1000),
]


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def one(impl: str, clients: int, min_size: int, beta: float, max_draws: int) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from fedgl.data.partition import dirichlet_partition
    from fedgl.data.synthetic import _labels, parse_synthetic
    from fedgl.errors import DataError
    from tests.test_partition_dirichlet import reference_dirichlet

    y = _labels(parse_synthetic("synthetic:arxiv"), np.random.default_rng([0, 0x5CA1E]))
    y = y.astype(np.int64)
    base = rss_mb()
    t0 = time.perf_counter()
    row: dict = {"impl": impl, "clients": clients, "beta": beta, "min_size": min_size}
    if impl == "old":
        owner = reference_dirichlet(y, clients, beta, 0, min_size, max_redraws=max_draws)
        row["outcome"] = "ok" if owner is not None else f"no split in {max_draws} draws"
        row["max_draws"] = max_draws
    else:
        try:
            dirichlet_partition(y, clients, beta, seed=0, min_size=min_size)
            row["outcome"] = "ok"
        except DataError as exc:
            row["outcome"] = f"error: {exc}"
    row["seconds"] = round(time.perf_counter() - t0, 3)
    row["rss_after_imports_mb"] = round(base, 1)
    row["peak_rss_mb"] = round(rss_mb(), 1)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--impl", choices=("old", "new"))
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--min-size", type=int, default=10)
    ap.add_argument("--beta", type=float, default=1.0)
    ap.add_argument("--max-draws", type=int, default=1000)
    args = ap.parse_args()
    if args.impl:
        print(json.dumps(one(args.impl, args.clients, args.min_size, args.beta, args.max_draws)))
        return
    for impl, clients, min_size, draws in CASES:
        subprocess.run([sys.executable, __file__, "--impl", impl, "--clients", str(clients),
                        "--min-size", str(min_size), "--beta", str(args.beta),
                        "--max-draws", str(draws)], check=True)


if __name__ == "__main__":
    main()
