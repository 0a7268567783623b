"""``fedgl ingest`` at scale: time and peak RSS of one organisation's ingest of ``N`` accounts
(string ids, 8 features, a fraud label, a split) and ``E`` transfers (a tenth of them to other
banks' accounts), CSV tables generated into a temporary folder first (not timed).

    python benchmarks/bench_ingest.py --sizes 100000:1000000 1000000:10000000

Each size runs in a fresh process (its own peak RSS). Prints one JSON object: per size the
generation and ingest seconds, the ingest's peak RSS (MiB) and the output's sizes.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np


def generate(folder: Path, n: int, e: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    ids = np.char.add("ACC-", np.arange(n).astype("U12"))
    x = np.round(rng.normal(size=(n, 8)), 4)
    fraud = rng.random(n) < 0.03
    split = np.array(["train", "train", "train", "val", "test"])[rng.integers(0, 5, size=n)]
    with open(folder / "nodes.csv", "w") as f:
        f.write("account,f1,f2,f3,f4,f5,f6,f7,f8,is_fraud,split\n")
        for start in range(0, n, 200_000):
            stop = min(n, start + 200_000)
            cols = [ids[start:stop]] + [x[start:stop, j].astype("U12") for j in range(8)] + \
                [np.where(fraud[start:stop], "1", "0"), split[start:stop]]
            f.write("\n".join(",".join(row) for row in zip(*cols, strict=True)) + "\n")
    with open(folder / "edges.csv", "w") as f:
        f.write("source,target\n")
        for start in range(0, e, 1_000_000):
            m = min(e, start + 1_000_000) - start
            a = rng.integers(0, n, size=m)
            b = rng.integers(0, n, size=m)
            far = rng.random(m) < 0.1
            tgt = np.where(far, np.char.add("OTHER-", b.astype("U12")),
                           np.char.add("ACC-", b.astype("U12")))
            f.write("\n".join(",".join(p) for p in zip(np.char.add("ACC-", a.astype("U12")),
                                                       tgt, strict=True)) + "\n")


def _child(folder: str, q: mp.Queue) -> None:
    from fedgl.data.own.ingest import IngestSpec, ingest
    from fedgl.data.own.secret import make_secret

    root = Path(folder)
    shutil.rmtree(root / "out", ignore_errors=True)
    (root / "secret").unlink(missing_ok=True)
    make_secret(root / "secret")
    t0 = time.perf_counter()
    ingest(IngestSpec(str(root / "nodes.csv"), str(root / "edges.csv"), 0, id_column="account",
                      label_column="is_fraud", split_column="split"), root / "secret",
           root / "out")
    seconds = time.perf_counter() - t0
    meta = json.loads((root / "out" / "ingest.json").read_text())
    q.put({"ingest_seconds": seconds,
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
           "num_edges_kept": meta["num_edges"], "num_remote": meta["num_remote"],
           "output_mb": sum(p.stat().st_size for p in (root / "out").iterdir()) / 2**20})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["100000:1000000"], metavar="N:E")
    args = ap.parse_args()
    cells = []
    for size in args.sizes:
        n, e = (int(float(v)) for v in size.split(":"))
        folder = Path(tempfile.mkdtemp(prefix="fedgl-bench-ingest-"))
        try:
            t0 = time.perf_counter()
            generate(folder, n, e)
            gen = time.perf_counter() - t0
            tables_mb = sum((folder / f).stat().st_size for f in ("nodes.csv", "edges.csv")) / 2**20
            q: mp.Queue = mp.get_context("spawn").Queue()
            p = mp.get_context("spawn").Process(target=_child, args=(str(folder), q))
            p.start()
            cell = {"nodes": n, "edges": e, "generate_seconds": gen, "tables_mb": tables_mb,
                    **q.get()}
            p.join()
            cells.append(cell)
            print(json.dumps(cell), flush=True)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps({"benchmark": "fedgl ingest", "cells": cells}, indent=2))

if __name__ == "__main__":
    main()
