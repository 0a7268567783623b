"""The leakage report stays bounded on large graphs: a block of the received-rows system too
large to solve densely is counted as unresolved (the recoverable count is then a lower bound)
instead of allocating it (an arxiv-sized graph asked for a 99 GiB block)."""

from __future__ import annotations

import torch

import fedgl.privacy.leakage as leakage
from fedgl.config import Config
from tests.helpers import random_graph, random_partition


def test_blocks_above_the_bound_are_unresolved_not_guessed(monkeypatch):
    graph = random_graph(nodes=70, seed=21)
    part = random_partition(graph.num_nodes, 3, seed=21)
    cfg = Config.from_dict({"clients": 3, "hops": 2})
    exact = leakage.leakage_report(graph, part, cfg)["per_client"]
    assert all(c["remote_nodes_unresolved"] == 0 for c in exact)
    monkeypatch.setattr(leakage, "MAX_BLOCK_SIDE", 1)
    bounded = leakage.leakage_report(graph, part, cfg)["per_client"]
    assert sum(c["remote_nodes_unresolved"] for c in bounded) > 0
    for e, b in zip(exact, bounded, strict=True):
        # peeled nodes are still found; the rest is a lower bound that the unresolved cover
        assert b["remote_nodes_recoverable"] <= e["remote_nodes_recoverable"]
        assert b["remote_nodes_recoverable"] + b["remote_nodes_unresolved"] >= \
            e["remote_nodes_recoverable"]


def test_a_system_above_the_bound_is_not_built(monkeypatch):
    """A client whose whole received-rows system is too large is not solved: all its remote
    nodes are unresolved (the number of distinct remote nodes in its rows), none guessed."""
    graph = random_graph(nodes=70, seed=22)
    part = random_partition(graph.num_nodes, 3, seed=22)
    cfg = Config.from_dict({"clients": 3, "hops": 2})
    exact = leakage.leakage_report(graph, part, cfg)["per_client"]
    monkeypatch.setattr(leakage, "MAX_SYSTEM_ENTRIES", 0)
    bounded = leakage.leakage_report(graph, part, cfg)["per_client"]
    src, dst = graph.edge_index
    for k, (e, b) in enumerate(zip(exact, bounded, strict=True)):
        own = torch.from_numpy(part.owner == k)
        rows = own.clone()
        rows[dst[own[src]]] = True  # V_k ∪ N(V_k)
        remote = {int(j) for i, j in zip(dst.tolist(), src.tolist(), strict=True)
                  if rows[i] and not own[j]}
        assert b["remote_nodes_recoverable"] == 0 < e["remote_nodes_recoverable"]
        assert b["remote_nodes_unresolved"] == len(remote)
        assert b["rows_single_remote_node"] == e["rows_single_remote_node"]
