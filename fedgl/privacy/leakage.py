"""The leakage report: what FedGCN's received sums disclose to clients.

This is an **analysis** computed by the experimenter from the full graph and the partition,
outside the federation (no party computes or receives it). For every client it counts, among the
rows it receives in the pre-training round, how many are made of exactly one remote node's
features: such a row minus the client's own part is ``d̃_j^{-1/2} x_j`` for a single remote node
j, i.e. node j's features up to a positive scale (exactly, for binary features, and exactly in
2-hop when j is the row's node, whose degree the client receives). HE and masking do not change
this (they hide values from the server, not from the receiving client); ``--min-contributors k``
removes rows with 1..k-1 remote nodes; DP noise blurs every row.
"""

from __future__ import annotations

from typing import Any

import torch

from fedgl.config import Config
from fedgl.data.graph import GraphData
from fedgl.data.partition import Partition

ANALYSIS_LABEL = ("analysis outside the federation (full graph + partition); "
                  "not a protocol message")


def remote_counts(graph: GraphData, part: Partition, hops: int) -> list[torch.Tensor]:
    """Per client: for each row it receives, the number of remote nodes in the row's sum.

    Row i's sum runs over the closed neighbourhood Ñ(i); client k receives rows V_k (1-hop) or
    V_k ∪ N(V_k) (2-hop); a node is remote to k if another client owns it."""
    k_total = part.num_clients
    if hops == 0:
        return [torch.zeros(0, dtype=torch.long) for _ in range(k_total)]
    owner = torch.from_numpy(part.owner).long()
    n = graph.num_nodes
    src, dst = graph.edge_index
    rows = torch.cat([torch.arange(n), dst])
    owners = torch.cat([owner, owner[src]])
    keys, counts = torch.unique(rows * k_total + owners, return_counts=True)
    row, client = keys // k_total, keys % k_total
    closed = torch.bincount(dst, minlength=n) + 1  # |Ñ(i)| = degree + self-loop
    remote = closed[row] - counts
    keep = torch.ones_like(row, dtype=torch.bool) if hops >= 2 else owner[row] == client
    return [remote[keep & (client == k)] for k in range(k_total)]


def leakage_report(graph: GraphData, part: Partition, cfg: Config) -> dict[str, Any]:
    """Per-client counts of received rows by how many remote nodes they aggregate."""
    m = cfg.min_contributors
    per_client = []
    for k, remote in enumerate(remote_counts(graph, part, cfg.hops)):
        single = int((remote == 1).sum())
        suppressed = int(((remote >= 1) & (remote < m)).sum()) if m > 1 else 0
        per_client.append({
            "client": k,
            "received_rows": int(remote.numel()),
            "rows_without_remote_nodes": int((remote == 0).sum()),
            "rows_single_remote_node": single,
            "rows_suppressed_by_min_contributors": suppressed,
            "exact_disclosure_rows": 0 if m > 1 else single,
        })
    total = {key: sum(c[key] for c in per_client) for key in per_client[0] if key != "client"} \
        if per_client else {}
    return {"label": ANALYSIS_LABEL, "hops": cfg.hops, "min_contributors": m,
            "dp_noised": cfg.dp_epsilon is not None,
            "per_client": per_client, "total": total}


def privacy_settings(cfg: Config, server: Any = None) -> dict[str, Any]:
    """The privacy options in force, derived parameters (DP σ, CKKS packing geometry) and what
    the server recorded about the protocol (blocks, ciphertexts, restarts)."""
    out: dict[str, Any] = {"secure_sum": cfg.secure_sum, "encrypt_models": cfg.encrypt_models,
                           "min_contributors": cfg.min_contributors, "dp": None, "he": None}
    if cfg.dp_epsilon is not None:
        from fedgl.privacy.dp import GaussianMechanism

        out["dp"] = GaussianMechanism(cfg.dp_epsilon, cfg.dp_delta, cfg.dp_clip).describe()
    if cfg.secure_sum == "he" or cfg.encrypt_models:
        from fedgl.privacy.he import HEParams

        p = HEParams.from_config(cfg)
        out["he"] = {"scheme": "CKKS (TenSEAL), symmetric encryption with a client-held key",
                     "security": "128-bit classical (HE standard bound on the modulus)",
                     "poly_degree": p.poly_degree, "coeff_bits": list(p.coeff_bits),
                     "scale_bits": p.scale_bits, "pack": p.pack, "slots": p.slots,
                     "pack_scale_bits": p.pack_scale_bits if p.pack > 1 else None,
                     "field_bits": p.field_bits if p.pack > 1 else None,
                     "key_holder": cfg.he_key_holder}
    stats = getattr(server, "privacy_stats", None)
    if stats:
        out["protocol"] = dict(stats)
    return out


def privacy_extra(graph: GraphData, part: Partition, cfg: Config,
                  server: Any = None) -> dict[str, Any]:
    """What a FedGCN repeat records in ``RepeatResult.extra``: ``leakage`` and ``privacy``."""
    if cfg.algorithm != "fedgcn":
        return {}
    return {"leakage": leakage_report(graph, part, cfg), "privacy": privacy_settings(cfg, server)}
