"""How far can a modified client move FedGCN's pre-training sums without tripping
``--feature-bound``? (docs/threat-model.md, "Client trust model")

For every client k of a FedGCN 2-hop federation it computes k's exact partial sums, the limit
the server checks them against (:class:`~fedgl.algorithms.fedgcn.bounds.UploadBounds`, from the
clients' own announcements) and the slack between them: the most a liar can add to one value of
a row unnoticed. It reports, over all clients:

- the largest constant a liar can add to *every* value of its rows undetected (the smallest
  per-row slack of that client), and how many rows at other clients that constant reaches;
- the median per-row slack (what a liar can add to a chosen row), relative to the limit;
- the server's check time for all uploads.

Usage: ``FEDGL_DATA=../shared/data python benchmarks/bench_client_bounds.py [--dataset cora]
[--adjacency-check edge]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from fedgl.algorithms.fedgcn.bounds import UploadBounds, row_max_abs
from fedgl.algorithms.fedgcn.checks import cross_edges
from fedgl.algorithms.fedgcn.client import FedGCNClient
from fedgl.algorithms.fedgcn.server import FedGCNServer
from fedgl.algorithms.runner import build_federation
from fedgl.config import Config
from fedgl.data.datasets import load_dataset
from fedgl.data.shards import make_partition


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="cora")
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--adjacency-check", default="node", choices=("node", "edge"),
                    help="edge: remote rows bounded by the owner-confirmed edges")
    args = ap.parse_args()
    graph = load_dataset(args.dataset)
    bound = float(graph.x.abs().max())
    cfg = Config.from_dict({"dataset": args.dataset, "clients": args.clients, "hops": 2,
                            "progress": False, "feature_bound": bound,
                            "adjacency_check": args.adjacency_check})
    part = make_partition(graph, cfg, args.seed)
    server = build_federation(graph, part, cfg, args.seed, FedGCNClient, FedGCNServer)
    rt = server.runtime
    clients = {k: rt.local_client(k) for k in rt.client_ids}
    announced, sums = {}, {}
    for k, c in clients.items():
        touched, exact, _, _ = c._release()
        announced[k] = {"ids": touched, "degrees": c.deg_tilde.clone(),
                        "cross_edges": cross_edges(c.data)}
        sums[k] = exact
    t0 = time.perf_counter()
    bounds = UploadBounds(announced, bound, 0.0, edges=args.adjacency_check == "edge")
    whys = [bounds.check(k, announced[k]["ids"].numpy(), sums[k]) for k in clients]
    seconds = time.perf_counter() - t0
    assert all(w is None for w in whys), whys
    print(f"{args.dataset}: {graph.num_nodes} nodes, {args.clients} clients, 2-hop, "
          f"feature bound B = {bound:g}, adjacency check {args.adjacency_check}; honest uploads "
          f"all within it (check {seconds:.3f} s)")
    touched_by = {k: set(announced[k]["ids"].tolist()) for k in clients}
    uniform, reach, rel, absolute = [], [], [], []
    for k in clients:
        ids = announced[k]["ids"].numpy()
        limit = bounds.limits(k, ids)
        slack = limit - row_max_abs(sums[k])
        uniform.append(float(slack.min()))
        rel.extend((slack / limit).tolist())
        absolute.extend(slack.tolist())
        reach.append(sum(len(touched_by[j] & touched_by[k]) for j in clients if j != k))
    print(f"largest constant on every value undetected, per client: min {min(uniform):.4f}, "
          f"median {float(np.median(uniform)):.4f}, max {max(uniform):.4f} (B = {bound:g})")
    print(f"(client, row) pairs at other clients such a constant reaches (2-hop), per liar: "
          f"median {int(np.median(reach))}, max {max(reach)}")
    print(f"per-row slack (most a liar adds to one value of a chosen row): median "
          f"{float(np.median(absolute)):.3f}, mean {float(np.mean(absolute)):.3f} (in units of "
          f"B = {bound:g}); relative to the row's limit: median {float(np.median(rel)):.3f}, "
          f"10th percentile {float(np.percentile(rel, 10)):.3f}")


if __name__ == "__main__":
    main()
