"""FedGCN's communication analysis (paper appendix F and I) as a tool: predicted against measured.

For a graph and a partition it reports, for 0-hop, 1-hop (eq. 33 and the released code's
variant) and 2-hop FedGCN, the pre-training communication

* **predicted** by appendix F's generic formula (Proposition F.1, eqs. 81-82)::

      up    Σ_i |c(Ñ_i)| d          values (every hop L ≥ 1)
      down  N d                     values (1-hop, eq. 81)
            Σ_k |N(V_k)| d          values (2-hop, eq. 82; also the 1-hop paper-code variant)

  where ``c(Ñ_i)`` is the set of clients owning i or a neighbour of i and ``N(V_k)`` includes
  ``V_k``. On an undirected graph ``Σ_i |c(Ñ_i)| = Σ_k |N(V_k)|`` (k ∈ c(Ñ_i) ⟺ i ∈ N(V_k)),
  so 2-hop costs ``2 Σ_i |c(Ñ_i)| d`` -- appendix F's "about twice 1-hop". In bytes: values times
  the feature element size, plus what this project's protocol adds (``fedgl/algorithms/fedgcn``):
  one int64 id per uploaded row and one int64 "rows wanted" count per client; with 2-hop the N
  degrees up and one degree per remote neighbour down;
* **expected under the SBM** (appendix I, eqs. 67/74/78 without the first-order approximation,
  for any partition): a node i of class c owned by client k reaches client k' ≠ k with
  probability ``1 - Π_{c'} (1 - p_{cc'})^{n_{k'c'}}`` (``p_cc = α``, ``p_cc' = μα``, ``n_{k'c'}``
  the class-c' nodes of client k'), so ``E Σ_i |c(Ñ_i)| = N + Σ_{k,c} n_{kc} Σ_{k'≠k} (1 -
  Π_{c'} (1 - p_{cc'})^{n_{k'c'}})``. With the p-split partition and K = C this is eq. (78);
  that closed form is reported too;
* **measured**: the ledger bytes of a real pre-training exchange on the same graph and partition
  (``bytes``: what was sent, sparse rows where smaller; ``dense_bytes``: the same messages counted
  dense, which is what the formula counts).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from fedgl.api import as_config, load_graph
from fedgl.config import Config
from fedgl.data.graph import GraphData
from fedgl.data.partition import Partition
from fedgl.data.shards import make_partition
from fedgl.errors import ConfigError

I64 = 8
METHODS = (("0-hop", 0, "eq33"), ("1-hop", 1, "eq33"), ("1-hop paper-code", 1, "paper-code"),
           ("2-hop", 2, "eq33"))


def formula_counts(edge_index: torch.Tensor, owner: np.ndarray, num_clients: int) -> dict:
    """``Σ_i |c(Ñ_i)|`` and ``Σ_k |N(V_k)|`` (``N(V_k)`` includes ``V_k``) from the full graph."""
    own = torch.from_numpy(np.asarray(owner, dtype=np.int64))
    n = len(own)
    src, dst = edge_index
    pairs = torch.cat([torch.arange(n) * num_clients + own, dst * num_clients + own[src]])
    c_sum = int(torch.unique(pairs).numel())
    nv = int(torch.unique(torch.cat([own * n + torch.arange(n), own[dst] * n + src])).numel())
    return {"sum_c_N": c_sum, "sum_N_Vk": nv, "nodes": n,
            "remote_neighbours": nv - n}


def sbm_expected_sum_c(y: np.ndarray, owner: np.ndarray, num_clients: int, classes: int,
                       alpha: float, mu: float) -> float:
    """``E Σ_i |c(Ñ_i)|`` under the SBM (edge probability α within a class, μα across)."""
    n_kc = np.zeros((num_clients, classes))
    np.add.at(n_kc, (owner, y), 1)
    p = np.full((classes, classes), mu * alpha)
    np.fill_diagonal(p, alpha)
    log_miss = np.log1p(-np.minimum(p, 1 - 1e-12)) @ n_kc.T  # [c, k']: no neighbour in k'
    reach = 1.0 - np.exp(log_miss)  # P(node of class c has a neighbour in client k')
    total = float(len(y))
    for k in range(num_clients):
        others = reach.sum(axis=1) - reach[:, k]
        total += float(n_kc[k] @ others)
    return total


def appendix_eq78(nodes: int, classes: int, alpha: float, mu: float, p: float) -> float:
    """Appendix eq. (78) in rows (divide out d): ``N (1 + (C-1)(1 - (1-α)^{Np/(CK)}
    (1-μα)^{N(C-p)/(CK)}))`` with K = C."""
    c = k = classes
    miss = (1 - alpha) ** (nodes * p / (c * k)) * (1 - mu * alpha) ** (nodes * (c - p) / (c * k))
    return nodes * (1 + (c - 1) * (1 - miss))


def predicted(counts: dict, d: int, value_bytes: int, num_clients: int) -> dict:
    """Values (appendix F) and bytes (values + this protocol's ids and degrees) per method."""
    n, c_sum, nv = counts["nodes"], counts["sum_c_N"], counts["sum_N_Vk"]
    out = {}
    for name, hops, variant in METHODS:
        if hops == 0:
            out[name] = {"values_up": 0, "values_down": 0, "bytes_up": 0, "bytes_down": 0}
            continue
        rows_down = n if (hops == 1 and variant == "eq33") else nv
        degrees = rows_down != n  # the neighbour rows come with degrees (fedgcn/one_hop.py)
        out[name] = {
            "values_up": c_sum * d, "values_down": rows_down * d,
            "bytes_up": c_sum * d * value_bytes + c_sum * I64 + num_clients * I64
            + (n * I64 if degrees else 0),
            "bytes_down": rows_down * d * value_bytes + ((nv - n) * I64 if degrees else 0)}
    return out


def measured(graph: GraphData, part: Partition, cfg: Config, seed: int) -> dict:
    """Ledger bytes of a real pre-training exchange for every method."""
    from fedgl.algorithms.fedgcn import FedGCNClient, FedGCNServer
    from fedgl.algorithms.runner import build_federation

    out = {}
    for name, hops, variant in METHODS:
        run_cfg = cfg.replace(algorithm="fedgcn", hops=hops, one_hop_variant=variant,
                              runtime="local", progress=False)
        server = build_federation(graph, part, run_cfg, seed, FedGCNClient, FedGCNServer)
        try:
            server.pretrain()
            led = server.runtime.ledger
            stats = server.pretrain_stats
            out[name] = {"bytes_up": led.bytes("pretrain", "up"),
                         "bytes_down": led.bytes("pretrain", "down"),
                         "dense_bytes_up": stats.get("bytes_up_dense_equivalent", 0),
                         "dense_bytes_down": stats.get("bytes_down_dense_equivalent", 0)}
        finally:
            server.runtime.close()
    return out


def analyze(config: Config | dict[str, Any] | None = None, **overrides: Any) -> dict:
    """The full analysis as a JSON-ready dict (see the module docstring)."""
    cfg = as_config(config, **overrides)
    if cfg.secure_sum != "none" or cfg.dp_epsilon is not None or cfg.min_contributors > 1:
        raise ConfigError("analyze-comm measures the plaintext exchange; drop secure_sum, "
                          "dp_epsilon and min_contributors")
    graph = load_graph(cfg)
    part = make_partition(graph, cfg, cfg.seed)
    counts = formula_counts(graph.edge_index, part.owner, part.num_clients)
    d, elem = graph.num_features, graph.x.element_size()
    pred = predicted(counts, d, elem, part.num_clients)
    meas = measured(graph, part, cfg, cfg.seed)
    rows = []
    for name, _, _ in METHODS:
        p, m = pred[name], meas[name]
        rows.append({"method": name, "predicted": p, "measured": m,
                     "dense_matches_formula": m["dense_bytes_up"] == p["bytes_up"]
                     and m["dense_bytes_down"] == p["bytes_down"]})
    result: dict[str, Any] = {
        "graph": {"dataset": cfg.dataset, "nodes": graph.num_nodes, "edges": graph.num_edges,
                  "features": d, "feature_bytes": elem, "classes": graph.num_classes},
        "partition": {"method": cfg.partition, "clients": part.num_clients, "beta": cfg.beta,
                      "mcmahan_p": cfg.mcmahan_p if cfg.partition == "p-split" else None,
                      "seed": cfg.seed,
                      "cross_client_edges": int(part.cross_client_edges(graph.edge_index))},
        "counts": counts, "methods": rows}
    if cfg.dataset.lower() == "sbm":
        y = graph.y.numpy()
        exp = sbm_expected_sum_c(y, part.owner, part.num_clients, cfg.sbm_classes,
                                 cfg.sbm_alpha, cfg.sbm_mu)
        sbm = {"alpha": cfg.sbm_alpha, "mu": cfg.sbm_mu, "expected_sum_c_N": exp,
               "observed_sum_c_N": counts["sum_c_N"],
               "relative_error": counts["sum_c_N"] / exp - 1 if exp else math.nan}
        if cfg.partition == "p-split" and part.num_clients == cfg.sbm_classes:
            sbm["appendix_eq78_sum_c_N"] = appendix_eq78(graph.num_nodes, cfg.sbm_classes,
                                                         cfg.sbm_alpha, cfg.sbm_mu, cfg.mcmahan_p)
        result["sbm"] = sbm
    return result


def format_text(result: dict) -> str:
    """A plain-text table of the analysis."""
    g, p, c = result["graph"], result["partition"], result["counts"]
    lines = [f"{g['dataset']}: N={g['nodes']} nodes, {g['edges']} edges, d={g['features']}; "
             f"{p['clients']} clients, {p['method']} partition, {p['cross_client_edges']} "
             "cross-client edges",
             f"Σ_i |c(Ñ_i)| = {c['sum_c_N']}   Σ_k |N(V_k)| = {c['sum_N_Vk']}",
             f"{'method':<17} {'predicted up':>13} {'dense up':>13} {'sent up':>13} "
             f"{'predicted down':>15} {'dense down':>13} {'sent down':>13}  match"]
    for r in result["methods"]:
        pr, me = r["predicted"], r["measured"]
        lines.append(f"{r['method']:<17} {pr['bytes_up']:>13,} {me['dense_bytes_up']:>13,} "
                     f"{me['bytes_up']:>13,} {pr['bytes_down']:>15,} "
                     f"{me['dense_bytes_down']:>13,} {me['bytes_down']:>13,}  "
                     f"{'yes' if r['dense_matches_formula'] else 'NO'}")
    if "sbm" in result:
        s = result["sbm"]
        line = (f"SBM (α={s['alpha']:g}, μ={s['mu']:g}): expected Σ_i |c(Ñ_i)| = "
                f"{s['expected_sum_c_N']:.1f}, observed {s['observed_sum_c_N']} "
                f"({s['relative_error']:+.1%})")
        if "appendix_eq78_sum_c_N" in s:
            line += f"; appendix eq. (78): {s['appendix_eq78_sum_c_N']:.1f}"
        lines.append(line)
    lines.append("bytes: predicted = appendix F values × feature size + ids/counts/degrees; "
                 "dense = the measured messages counted dense; sent = the ledger's bytes "
                 "(sparse rows where smaller)")
    return "\n".join(lines)
