"""``fedgl ingest`` at scale: time and peak RSS of one organisation's ingest of ``N`` accounts
(string ids, 8 features, a fraud label, a split) and ``E`` transfers (a tenth of them to other
banks' accounts), CSV tables generated into a temporary folder first (not timed).

    python benchmarks/bench_ingest.py --sizes 100000:1000000 1000000:10000000
    python benchmarks/bench_ingest.py --sizes 1e7:1e8 --tables /big/disk   # keeps the tables
    python benchmarks/bench_ingest.py --reader python      # the core install's reader

Each size (and reader) runs in a fresh process (its own peak RSS). Prints one JSON object: per
cell the generation and ingest seconds (wall, and the ingest process's CPU seconds: a measure
that other work on the machine moves less), the ingest's peak RSS (MiB), the output's sizes and
the load average (1 minute) before and after the cell.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
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


def _child(folder: str, reader: str | None, vertical: bool, q: mp.Queue) -> None:
    from fedgl.data.own.ingest import IngestSpec, ingest, ingest_vertical
    from fedgl.data.own.secret import make_secret

    root = Path(folder)
    out = root / "out"
    shutil.rmtree(out, ignore_errors=True)
    (root / "secret").unlink(missing_ok=True)
    make_secret(root / "secret")
    spec = IngestSpec(str(root / "nodes.csv"), str(root / "edges.csv"), 0, id_column="account",
                      label_column="is_fraud", split_column="split")
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    (ingest_vertical if vertical else ingest)(spec, root / "secret", out, reader=reader)
    seconds = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    meta = json.loads((out / ("vertical.json" if vertical else "ingest.json")).read_text())
    q.put({"ingest_seconds": seconds,
           "ingest_cpu_seconds": (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime),
           "peak_rss_mb": cpu1.ru_maxrss / 1024.0,
           "num_edges_kept": meta["num_edges"], "num_remote": meta.get("num_remote"),
           "output_mb": sum(p.stat().st_size for p in out.iterdir()) / 2**20})
    shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["100000:1000000"], metavar="N:E")
    ap.add_argument("--reader", nargs="+", default=["default"],
                    choices=["default", "arrow", "python"],
                    help="the table reader(s) to time (default: arrow where pyarrow is installed)")
    ap.add_argument("--vertical", action="store_true", help="time `fedgl ingest --vertical`")
    ap.add_argument("--tables", metavar="DIR",
                    help="generate the tables under DIR/<N>-<E> and keep them (reused when there)")
    args = ap.parse_args()
    cells = []
    for size in args.sizes:
        n, e = (int(float(v)) for v in size.split(":"))
        keep = args.tables is not None
        folder = Path(args.tables) / f"{n}-{e}" if keep else \
            Path(tempfile.mkdtemp(prefix="fedgl-bench-ingest-"))
        try:
            t0 = time.perf_counter()
            if not (folder / "edges.csv").is_file():
                folder.mkdir(parents=True, exist_ok=True)
                generate(folder, n, e)
            gen = time.perf_counter() - t0
            tables_mb = sum((folder / f).stat().st_size for f in ("nodes.csv", "edges.csv")) / 2**20
            for reader in args.reader:
                load = os.getloadavg()[0]
                q: mp.Queue = mp.get_context("spawn").Queue()
                p = mp.get_context("spawn").Process(target=_child, args=(
                    str(folder), None if reader == "default" else reader, args.vertical, q))
                p.start()
                cell = {"nodes": n, "edges": e, "reader": reader, "vertical": args.vertical,
                        "generate_seconds": gen, "tables_mb": tables_mb, **q.get(),
                        "load_average_before": load, "load_average_after": os.getloadavg()[0]}
                p.join()
                cells.append(cell)
                print(json.dumps(cell), flush=True)
        finally:
            if not keep:
                shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps({"benchmark": "fedgl ingest", "cells": cells}, indent=2))

if __name__ == "__main__":
    main()
