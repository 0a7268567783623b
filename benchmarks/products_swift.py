"""Swift-FedGNN on the products-sized synthetic graph (2,449,029 nodes, 61,859,140 undirected
edges, 100 features, 47 classes): METIS partitioning and ``--iters`` iterations in one process,
with the resident memory after every stage, partition seconds, seconds per local and per
cross-client iteration, and the cost of a bounded evaluation.

Setting: 20 in-process clients, METIS (seed 0), GraphSAGE hidden 256, batch 256 per client,
10 one-hop then 15 two-hop neighbours (``num_neighbors`` 10,15, first layer first; the paper's
DGL-order [15, 10]), I = 10, K = 10 of 20 (the paper's products setting), Adam. Evaluation is
bounded (``--eval-max-nodes`` labelled nodes per split per client, ``--eval-num-neighbors``; see
docs/swift-fedgnn.md); it is timed apart from the iterations.

    nice -n 5 flock /work/coord/bigmem.lock python benchmarks/products_swift.py [--iters 100]
        [--owner-cache /tmp/products_metis20.npy] [--eval-every 50]

``--metis-max-degree k`` partitions a degree-capped sparsification (METIS needs about 100 bytes
per directed edge; docs/decisions.md). ``--owner-cache`` reuses a METIS assignment saved by an
earlier run (same graph, clients and seed; the file holds the owner array and is checked
against the graph's size); partition seconds are then those of the run that wrote it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from types import SimpleNamespace


def rss_mb() -> tuple[float, float]:
    """(current, peak) resident set of this process in MB, from /proc/self/status."""
    cur = peak = 0.0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                cur = int(line.split()[1]) / 1024.0
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024.0
    return cur, peak


def log(stages: list, name: str, **info) -> None:
    cur, peak = rss_mb()
    row = {"stage": name, "rss_mb": round(cur), "peak_rss_mb": round(peak), **info}
    stages.append(row)
    print(json.dumps(row), file=sys.stderr, flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="synthetic:products")
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--cross", type=int, default=10)
    p.add_argument("--period", type=int, default=10)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--eval-max-nodes", type=int, default=50)
    p.add_argument("--eval-num-neighbors", default="10,15", help="first layer first")
    p.add_argument("--eval-batch", type=int, default=1000)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--owner-cache", default="")
    p.add_argument("--metis-max-degree", type=int, default=0,
                   help="partition a degree-capped sparsification (0: the whole graph)")
    p.add_argument("--out", default="")
    args = p.parse_args()

    import numpy as np
    import torch

    from fedgl.algorithms.minibatch.runner import initial_weights, start_runtime
    from fedgl.algorithms.minibatch.server import FedSGDServer
    from fedgl.algorithms.minibatch.settings import MiniBatchSettings
    from fedgl.algorithms.swift_fedgnn.server import swift_schedule
    from fedgl.data.datasets import load_dataset
    from fedgl.data.partition import Partition, metis_partition
    from fedgl.data.shards import make_partition

    torch.set_num_threads(args.threads)
    stages: list[dict] = []
    t0 = time.perf_counter()
    graph = load_dataset(args.dataset, os.environ.get("FEDGL_DATA", "../shared/data"), seed=0)
    log(stages, "graph loaded", seconds=round(time.perf_counter() - t0, 1),
        nodes=graph.num_nodes, directed_edges=int(graph.edge_index.shape[1]),
        edge_dtype=str(graph.edge_index.dtype))
    cfg = SimpleNamespace(
        clients=args.clients, partition="metis", beta=1.0, min_client_size=1, mcmahan_p=0.0,
        model="sage", hidden=args.hidden, layers=2, dropout=0.0, batch_size=256,
        num_neighbors="10,15", lr=1e-3, weight_decay=5e-4, device="cpu", runtime="local",
        period=args.period, cross_clients=args.cross, cross_at_start=True,
        eval_num_neighbors=args.eval_num_neighbors, eval_max_nodes=args.eval_max_nodes)
    t0 = time.perf_counter()
    partition_seconds = None
    if args.owner_cache and os.path.isfile(args.owner_cache):
        owner = np.load(args.owner_cache)
        if owner.shape != (graph.num_nodes,) or int(owner.max()) != args.clients - 1:
            sys.exit(f"{args.owner_cache} does not hold a {args.clients}-client assignment of "
                     f"this graph; delete it or pass another --owner-cache")
        part = Partition(owner.astype(np.int64), args.clients)
        source = f"reused from {args.owner_cache}"
    else:
        if args.metis_max_degree:
            part = metis_partition(graph.edge_index, graph.num_nodes, args.clients, seed=0,
                                   max_degree=args.metis_max_degree)
        else:
            part = make_partition(graph, cfg, 0)
        partition_seconds = time.perf_counter() - t0
        source = "computed"
        if args.owner_cache:
            np.save(args.owner_cache, part.owner)
    cut = part.cross_client_edges(graph.edge_index)
    log(stages, "partitioned", seconds=round(time.perf_counter() - t0, 1), source=source,
        sizes=[min(part.sizes()), max(part.sizes())], cross_client_directed_edges=int(cut))
    s = MiniBatchSettings.from_config(cfg)
    t0 = time.perf_counter()
    runtime = start_runtime(graph, part, cfg, 0)
    log(stages, "clients built", seconds=round(time.perf_counter() - t0, 1))
    server = FedSGDServer(runtime, s, initial_weights(graph, s, 0), swift_schedule(cfg, s),
                          seed=0, num_nodes=graph.num_nodes, eval_batch=args.eval_batch)
    num_nodes = graph.num_nodes
    del graph  # the federation holds its own copies from here on
    t0 = time.perf_counter()
    server.setup()
    log(stages, "server structure", seconds=round(time.perf_counter() - t0, 1),
        structure_bytes=runtime.ledger.bytes("pretrain"))
    local_s, cross_s, evals = [], [], []
    for t in range(args.iters):
        t0 = time.perf_counter()
        m = server.iteration(t)
        dt = time.perf_counter() - t0
        (cross_s if m["cross_clients"] else local_s).append(dt)
        if t % 10 == 0 or t == args.iters - 1:
            log(stages, f"iteration {t}", seconds=round(dt, 3), loss=round(m["train_loss"], 4),
                cross_clients=m["cross_clients"], iteration_bytes=m["iteration_bytes"])
        if (t + 1) % args.eval_every == 0 or t == args.iters - 1:
            t0 = time.perf_counter()
            acc = server.evaluate(t)
            evals.append({"iteration": t + 1, "seconds": time.perf_counter() - t0, **acc})
            log(stages, f"evaluation after {t + 1}", **{k: round(v, 4) if isinstance(v, float)
                                                          else v for k, v in evals[-1].items()
                                                          if not isinstance(v, dict)})
    runtime.close()
    out = {
        "setting": {**vars(cfg), "iterations": args.iters, "nodes": num_nodes,
                    "eval_batch": args.eval_batch, "threads": args.threads},
        "partition_seconds": partition_seconds, "partition_source": source,
        "metis_max_degree": args.metis_max_degree,
        "seconds_per_local_iteration": sum(local_s) / max(1, len(local_s)),
        "seconds_per_cross_iteration": sum(cross_s) / max(1, len(cross_s)),
        "seconds_per_iteration": (sum(local_s) + sum(cross_s)) / max(1, args.iters),
        "local_iterations": len(local_s), "cross_iterations": len(cross_s),
        "train_bytes": runtime.ledger.bytes("train"),
        "evaluations": evals,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "stages": stages,
    }
    print(json.dumps(out, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
