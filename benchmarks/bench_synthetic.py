"""Generation time, cache-load time and peak memory of the large synthetic graphs.

    python benchmarks/bench_synthetic.py --dataset synthetic:arxiv --cache-dir /tmp/fedgl-syn

Prints one JSON object: sizes, generation seconds (first load, cache empty), cache-load seconds
(second load, checksums verified), conversion to GraphData seconds, the graph's statistics
(degree tail exponent, edge homophily) and this process's peak RSS after each step.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import time
from pathlib import Path

import numpy as np

from fedgl.data.synthetic import (
    edge_homophily,
    load_synthetic_arrays,
    parse_synthetic,
    tail_exponent,
    to_graph_data,
)


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="synthetic:arxiv")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache-dir", default="/tmp/fedgl-synthetic-bench")
    ap.add_argument("--keep", action="store_true", help="keep an existing cache (default: clear)")
    ap.add_argument("--no-graph", action="store_true", help="skip the GraphData conversion")
    args = ap.parse_args()
    spec = parse_synthetic(args.dataset)
    folder = Path(args.cache_dir) / spec.key(args.seed)
    if folder.exists() and not args.keep:
        shutil.rmtree(folder)
    out: dict = {"dataset": args.dataset, "nodes": spec.nodes, "edges": spec.edges,
                 "features": spec.features, "classes": spec.classes}
    t0 = time.perf_counter()
    arrays = load_synthetic_arrays(spec, args.seed, cache_dir=args.cache_dir)
    out["generate_seconds"] = round(time.perf_counter() - t0, 2)
    out["peak_rss_mb_after_generate"] = round(peak_mb())
    out["cache_mb"] = round(sum(f.stat().st_size for f in folder.iterdir()) / 2**20, 1)
    del arrays
    t0 = time.perf_counter()
    arrays = load_synthetic_arrays(spec, args.seed, cache_dir=args.cache_dir)
    out["cache_load_seconds"] = round(time.perf_counter() - t0, 2)
    deg = np.diff(arrays["indptr"])
    out["degree"] = {"mean": round(float(deg.mean()), 2), "max": int(deg.max()),
                     "isolated_share": round(float((deg == 0).mean()), 4),
                     "tail_exponent_k20": round(tail_exponent(deg, 20), 3)}
    if not args.no_graph:
        t0 = time.perf_counter()
        graph = to_graph_data(arrays, spec)
        out["to_graph_seconds"] = round(time.perf_counter() - t0, 2)
        out["edge_homophily"] = round(edge_homophily(graph), 4)
    out["peak_rss_mb"] = round(peak_mb())
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
