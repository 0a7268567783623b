"""Seconds per Swift-FedGNN iteration against a centralised mini-batch GraphSAGE step with the
same batch size and fan-outs, side by side, each part in its own process (so that each peak RSS
is its own).

Parts (one after another, never in parallel):
- ``central``: one party, global CSR, a uniform batch of ``--batch`` training nodes, fan-outs
  15,10, GraphSAGE hidden ``--hidden``, Adam: seconds per step;
- ``local``: Swift-FedGNN local iterations (K = 0 schedule) with ``--clients`` in-process
  clients, each a batch of up to ``--batch`` of its own training nodes: seconds per iteration
  (all clients one after another, plus copies, averaging and Adam) and per client step;
- ``cross``: Swift-FedGNN iterations in which ``--cross`` clients train cross-client.

    FEDGL_DATA=../shared/data python benchmarks/perf_swift.py [--dataset citeseer|sbm]
        [--iters 30] [--clients 10] [--batch 256] [--hidden 256]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time


def load(args):
    from fedgl.data.datasets import load_dataset
    from fedgl.data.graph import row_normalize

    if args.dataset == "citeseer":
        g = load_dataset("citeseer", os.environ.get("FEDGL_DATA", "../shared/data"))
        return g.with_features(row_normalize(g.x))
    import torch

    from fedgl.data.sbm import stochastic_block_model

    g = stochastic_block_model(nodes=args.sbm_nodes, classes=10, alpha=args.sbm_alpha, mu=0.1,
                               features=100, seed=0)
    train = torch.rand(g.num_nodes, generator=torch.Generator().manual_seed(0)) < 0.3
    return type(g)(g.name, g.x, g.y, g.edge_index, train, ~train, ~train, g.num_classes)


def part_central(args) -> dict:
    import torch
    import torch.nn.functional as F

    from fedgl.data.sampling import CSRGraph, sample_blocks, uniform_batch
    from fedgl.models import build_model
    from fedgl.models.blocks import block_forward

    g = load(args)
    torch.manual_seed(0)
    model = build_model("sage", g.num_features, args.hidden, g.num_classes, 2, 0.0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=5e-4)
    csr = CSRGraph.from_edge_index(g.edge_index, g.num_nodes)
    pool = g.train_mask.nonzero().flatten()
    gen = torch.Generator().manual_seed(0)

    def step():
        batch = uniform_batch(pool, args.batch, gen)
        blocks = sample_blocks(csr, batch, [10, 15], gen)   # 10 one-hop, 15 two-hop
        opt.zero_grad()
        F.nll_loss(block_forward(model, "mean", g.x[blocks[0].src_ids], blocks), g.y[batch]).backward()
        opt.step()

    for _ in range(3):
        step()
    t0 = time.perf_counter()
    for _ in range(args.iters):
        step()
    return {"seconds_per_step": (time.perf_counter() - t0) / args.iters}


def part_federated(args, cross: int) -> dict:
    import torch

    from fedgl.algorithms.minibatch.client import MiniBatchClient
    from fedgl.algorithms.minibatch.runner import initial_weights
    from fedgl.algorithms.minibatch.server import FedSGDServer, PeriodicSchedule
    from fedgl.algorithms.minibatch.settings import MiniBatchSettings
    from fedgl.data.client_data import split_graph
    from fedgl.data.partition import partition
    from fedgl.federation.ledger import Ledger
    from fedgl.federation.runtime import LocalRuntime

    g = load(args)
    t0 = time.perf_counter()
    part = partition(g, args.clients, method="metis", seed=0, min_size=1)
    part_s = time.perf_counter() - t0
    s = MiniBatchSettings(model="sage", hidden=args.hidden, layers=2, batch_size=args.batch,
                          num_neighbors=(10, 15), lr=1e-3)
    rt = LocalRuntime({d.client_id: MiniBatchClient(d, s, 0) for d in split_graph(g, part)}, Ledger())
    srv = FedSGDServer(rt, s, initial_weights(g, s, 0), PeriodicSchedule(1, cross, [15, 10]),
                       seed=0, num_nodes=g.num_nodes)
    srv.setup()
    for t in range(3):
        srv.iteration(t)
    b0 = rt.ledger.bytes("train")
    t0 = time.perf_counter()
    for t in range(3, 3 + args.iters):
        srv.iteration(t)
    per_iter = (time.perf_counter() - t0) / args.iters
    del torch
    return {"seconds_per_iteration": per_iter, "seconds_per_client_step": per_iter / args.clients,
            "bytes_per_iteration": (rt.ledger.bytes("train") - b0) / args.iters,
            "partition_seconds": part_s, "cross_clients": cross}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="citeseer", choices=["citeseer", "sbm"])
    p.add_argument("--sbm-nodes", type=int, default=20000)
    p.add_argument("--sbm-alpha", type=float, default=0.002)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--clients", type=int, default=10)
    p.add_argument("--cross", type=int, default=5)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--part", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.part:
        import torch

        torch.set_num_threads(args.threads)
        out = (part_central(args) if args.part == "central"
               else part_federated(args, 0 if args.part == "local" else args.cross))
        out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        print(json.dumps(out))
        return
    res = {}
    for part in ("central", "local", "cross"):
        cmd = [sys.executable, __file__, "--part", part] + [a for a in sys.argv[1:]]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        res[part] = json.loads(done.stdout.strip().splitlines()[-1])
    c = res["central"]["seconds_per_step"]
    res["ratios"] = {
        "local_client_step_vs_central_step": res["local"]["seconds_per_client_step"] / c,
        "local_iteration_vs_central_step": res["local"]["seconds_per_iteration"] / c,
        "cross_iteration_vs_local_iteration": (res["cross"]["seconds_per_iteration"]
                                               / res["local"]["seconds_per_iteration"]),
    }
    res["setting"] = vars(args)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
