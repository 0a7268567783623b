"""FedSage+ diagnosis: does a better mend raise accuracy? (the oracle-mend experiment)

Builds the FedGCN Table 2 federation (Cora, 10 clients, Dirichlet β, 2-layer GCN, 300 rounds of
3 SGD steps at lr 0.5) with FedSage+'s clients, replaces each client's mend according to
``--modes`` and runs the FedAvg rounds through the real runtime, printing the final pooled test
accuracy per (mode, seed) as JSON (``test_acc``, the clients' own test nodes on their mended
graphs, the project's metric; ``whole_graph_test_acc``, the final model on the whole graph, the
FedSage+ reference's metric):

- ``none``: no mend (the plain local subgraph: FedGCN 0-hop's inputs);
- ``generator``: NeighGen trained through the real protocol (what ``fedgl run`` does);
- ``oracle``: every own node gets its TRUE cross-client neighbours' features, all of them;
- ``oracle-cap``: the same, at most ``num_pred`` per node (a seeded random subset);
- ``oracle-count``: the true (capped) counts with the trained generator's features;
- ``generator-count``: the generator's counts with true features (capped, random subset; a
  predicted row past the node's true count is zero);
- ``count-self`` / ``count-mean``: the true (capped) counts, each generated row a copy of the
  node's own features / of the client's mean feature row (what a generator that collapses to
  its input or to the mean would add).

The oracle modes read the global graph, which no party may do: a diagnosis, not an algorithm.

    FEDGL_DATA=../shared/data python benchmarks/diagnose_fedsage_mend.py --beta 1 --seeds 0
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

MODES = ("none", "generator", "oracle", "oracle-cap", "oracle-count", "generator-count",
         "count-self", "count-mean")


def true_missing(c, graph_x: torch.Tensor, cap: int | None, seed: int
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """[n, P, d] true cross-client neighbour features per own node and their counts (at most
    ``cap`` per node, a seeded random subset; None: all)."""
    d = c.data
    src, dst = d.edge_index
    remote = ~d.owns(src)
    v = d.global_to_local(dst[remote])
    u = src[remote]
    g = torch.Generator().manual_seed(seed * 7919 + d.client_id)
    order = torch.randperm(v.numel(), generator=g)
    v, u = v[order], u[order]
    order = torch.argsort(v, stable=True)
    v, u = v[order], u[order]
    counts = torch.bincount(v, minlength=d.num_nodes)
    start = torch.cumsum(counts, 0) - counts
    slot = torch.arange(v.numel()) - start[v]
    p = int(counts.max()) if cap is None else cap
    p = max(p, 1)
    keep = slot < p
    gen = torch.zeros(d.num_nodes, p, d.num_features)
    gen[v[keep], slot[keep]] = graph_x[u[keep]]
    return gen, counts.clamp(max=p)


def generator_output(c) -> tuple[torch.Tensor, torch.Tensor]:
    """The trained NeighGen's features and rounded counts on the full local subgraph (as
    ``mend`` computes them)."""
    from fedgl.algorithms.base import client_seed

    ng, d = c.neighgen, c.data
    ng.eval()
    g = torch.Generator().manual_seed(client_seed(c.seed, d.client_id) + 4242)
    with torch.no_grad():
        z = ng.encode(d.x, c.local_ei, g)
        n_gen = ng.counts(z).round().clamp(0, c.opts.num_pred).long()
        gen = ng.fgen(z + torch.randn(z.shape, generator=g), g)
    return gen, n_gen


def feature_report(clients: list, graph_x: torch.Tensor, graph_y: torch.Tensor) -> dict:
    """How close the trained generator's rows are to the true cross-client neighbours (nodes
    with at least one; the first ``min(true count, num_pred)`` rows): the mean over rows of the
    squared distance / d to the nearest true neighbour, against the same for the client's mean
    feature row; the rows' spread across nodes against that of real rows; and how often the
    class whose mean feature row (over the whole graph) is nearest to a node's generated rows'
    mean is the node's class, by cosine after subtracting the client's mean row (the same for
    its true neighbours' mean)."""
    centres = torch.stack([graph_x[graph_y == k].mean(0) for k in range(int(graph_y.max()) + 1)])
    gen_err, mean_err, gen_hit, true_hit, nodes, gen_sd, real_sd = [], [], [], [], 0, [], []
    for c in clients:
        true, counts = true_missing(c, graph_x, c.opts.num_pred, 0)
        gen, _ = generator_output(c)
        has = counts > 0
        gen, true, counts = gen[has], true[has], counts[has]
        valid = torch.arange(gen.size(1)).unsqueeze(0) < counts.unsqueeze(1)
        dist = ((gen.unsqueeze(2) - true.unsqueeze(1)) ** 2).mean(-1)  # [n, P, P]
        dist = dist.masked_fill(~valid.unsqueeze(1), float("inf")).amin(-1)
        gen_err.append(dist[valid])
        mu = c.data.x.mean(0)
        md = ((mu - true) ** 2).mean(-1)  # [n, P]
        mean_err.append(md[valid])
        w = valid.unsqueeze(-1).float()
        g_mean = (gen * w).sum(1) / counts.unsqueeze(1)
        t_mean = (true * w).sum(1) / counts.unsqueeze(1)
        y = c.data.y[has]
        unit = torch.nn.functional.normalize
        gen_hit.append((unit(g_mean - mu) @ unit(centres - mu).T).argmax(1) == y)
        true_hit.append((unit(t_mean - mu) @ unit(centres - mu).T).argmax(1) == y)
        gen_sd.append(gen[valid].std(0).mean())
        real_sd.append(c.data.x.std(0).mean())
        nodes += int(has.sum())
    return {"nodes_with_missing": nodes,
            "gen_nearest_true_mse": round(float(torch.cat(gen_err).mean()), 5),
            "mean_row_nearest_true_mse": round(float(torch.cat(mean_err).mean()), 5),
            "gen_class_hit": round(float(torch.cat(gen_hit).float().mean()), 4),
            "true_class_hit": round(float(torch.cat(true_hit).float().mean()), 4),
            "gen_spread": round(float(torch.stack(gen_sd).mean()), 5),
            "real_spread": round(float(torch.stack(real_sd).mean()), 5)}


def run_mode(mode: str, seed: int, setting: dict) -> dict:
    from fedgl.algorithms.fedsage_plus.client import FedSagePlusClient, mended_inputs
    from fedgl.algorithms.fedsage_plus.server import FedSagePlusServer
    from fedgl.algorithms.runner import build_federation
    from fedgl.api import as_config, load_graph
    from fedgl.data.shards import make_partition
    from fedgl.evaluation import OracleEvaluator

    cfg = as_config(algorithm="fedsage-plus", progress=False, seed=seed, oracle_eval=False,
                    **setting)
    graph = load_graph(cfg)
    part = make_partition(graph, cfg, seed)
    server = build_federation(graph, part, cfg, seed, FedSagePlusClient, FedSagePlusServer)
    t0 = time.perf_counter()
    generated = 0
    try:
        if mode in ("generator", "oracle-count", "generator-count"):
            server.pretrain()
        for k in server.runtime.client_ids:
            c = server.runtime.local_client(k)
            if mode == "none":
                continue
            if mode != "generator":
                cap = None if mode == "oracle" else c.opts.num_pred
                gen, n_gen = true_missing(c, graph.x, cap, seed)
                if mode == "oracle-count":
                    gen = generator_output(c)[0]
                elif mode == "generator-count":
                    n_gen = generator_output(c)[1]
                elif mode == "count-self":
                    gen = c.data.x.unsqueeze(1).expand_as(gen).clone()
                elif mode == "count-mean":
                    gen = c.data.x.mean(0).expand_as(gen).clone()
                c._mend = mended_inputs(c.data.x, c.local_ei, gen, n_gen,
                                        torch.arange(c.data.num_nodes))
                c._inputs = c._train_cache = None
            generated += int(c.model_inputs().x.size(0) - c.data.num_nodes)
        extra = {}
        if mode in ("generator", "oracle-count", "generator-count"):
            extra = feature_report([server.runtime.local_client(k)
                                    for k in server.runtime.client_ids], graph.x, graph.y)
        metrics: dict = {}
        for _t, _weights, m in server.rounds():
            metrics = m
        whole = OracleEvaluator(graph, cfg)(server.weights)["oracle_test_acc"]
    finally:
        server.runtime.close()
    return {"mode": mode, "seed": seed, "beta": setting["beta"], "generated": generated, **extra,
            "test_acc": round(metrics["test_acc"], 4),
            "whole_graph_test_acc": round(whole, 4), "seconds": round(time.perf_counter() - t0,
                                                                        1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default="none,generator,oracle,oracle-cap")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--beta", type=float, default=1.0)
    ap.add_argument("--dataset", default="cora")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="extra config keys (e.g. rounds=100 cross_clients=1)")
    args = ap.parse_args(argv)
    setting = {"dataset": args.dataset, "beta": args.beta, "clients": 10, "lr": 0.5,
               "local_steps": 3, "eval_every": 300, "gen_batch_size": 0, "gen_hidden": 256,
               "cross_clients": 1}
    for item in args.set:
        key, value = item.split("=", 1)
        setting[key] = json.loads(value) if value[:1].isdigit() or value[:1] in "-[{tf" else value
    torch.set_num_threads(1)
    for mode in args.modes.split(","):
        if mode not in MODES:
            ap.error(f"unknown mode {mode!r}; one of {', '.join(MODES)}")
        for seed in (int(s) for s in args.seeds.split(",")):
            print(json.dumps(run_mode(mode, seed, setting)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
