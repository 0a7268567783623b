"""FedSage+ diagnosis: how many neighbours does NeighGen's count head actually generate?

Trains FedSage+'s generators (the real federated protocol, reference defaults unless overridden)
and prints, per setting, over all clients: the true missing-neighbour counts of the impaired
graphs it is trained on, the count head's predictions there and on the full local graphs used for
mending, and how many neighbours those predictions generate with this project's rounding
(``round``) and with the reference code's ``int()`` truncation.

    FEDGL_DATA=../shared/data python benchmarks/diagnose_fedsage_counts.py
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

import torch


def _stats(values: torch.Tensor) -> dict:
    v = values.float()
    return {"mean": round(float(v.mean()), 4), "max": round(float(v.max()), 4),
            "share_ge_0.5": round(float((v >= 0.5).float().mean()), 4),
            "share_ge_1": round(float((v >= 1).float().mean()), 4)}


def diagnose(setting: dict, seed: int) -> dict:
    from fedgl.algorithms.fedsage_plus.client import FedSagePlusClient
    from fedgl.algorithms.fedsage_plus.server import FedSagePlusServer
    from fedgl.algorithms.runner import build_federation
    from fedgl.api import as_config, load_graph
    from fedgl.data.shards import make_partition

    cfg = as_config(algorithm="fedsage-plus", progress=False, seed=seed, **setting)
    graph = load_graph(cfg)
    part = make_partition(graph, cfg, seed)
    server = build_federation(graph, part, cfg, seed, FedSagePlusClient, FedSagePlusServer)
    t0 = time.perf_counter()
    server.pretrain()
    seconds = time.perf_counter() - t0
    missing, pred_imp, pred_full, local_deg = [], [], [], []
    for k in server.runtime.client_ids:
        c = server.runtime.local_client(k)
        ng = c.neighgen
        ng.eval()
        with torch.no_grad():
            z_imp = ng.encode(c.data.x[c.kept], c.imp_ei, None)
            z_full = ng.encode(c.data.x, c.local_ei, None)
            pred_imp.append(ng.counts(z_imp))
            pred_full.append(ng.counts(z_full))
        missing.append(c.missing)
        local_deg.append(torch.bincount(c.local_ei[1], minlength=c.data.num_nodes))
    missing, pred_imp, pred_full = torch.cat(missing), torch.cat(pred_imp), torch.cat(pred_full)
    local_deg = torch.cat(local_deg)
    p = cfg.options.num_pred
    server.runtime.close()
    return {"setting": setting, "seed": seed, "generator_seconds": round(seconds, 1),
            "cross_client_edge_share": round(part.cross_client_edges(graph.edge_index)
                                             / max(graph.num_edges, 1), 4),
            "local_degree_mean": round(float(local_deg.float().mean()), 4),
            "true_missing_impaired": _stats(missing),
            "predicted_impaired": _stats(pred_imp),
            "predicted_full_local": _stats(pred_full),
            "generated_round": int(pred_full.round().clamp(0, p).sum()),
            "generated_trunc_reference": int(pred_full.trunc().clamp(0, p).sum()),
            "own_nodes": int(len(pred_full)),
            "final_generator_loss": server.generator_log[-1]["loss"],
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


SETTINGS = {
    "project": {"dataset": "cora", "clients": 10, "partition": "dirichlet", "beta": 1.0},
    "reference": {"dataset": "cora", "clients": 3, "partition": "louvain"},
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="extra config keys for every setting (e.g. gen_epochs=5)")
    args = parser.parse_args(argv)
    extra = {}
    for item in args.set:
        key, value = item.split("=", 1)
        extra[key] = json.loads(value) if value[:1].isdigit() or value[:1] in "-[{" else value
    torch.set_num_threads(1)
    out = [diagnose({**SETTINGS[name], **extra}, args.seed) for name in args.settings]
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
