"""The leakage report stays bounded on large graphs: a block of the received-rows system too
large to solve densely is counted as unresolved (the recoverable count is then a lower bound)
instead of allocating it (an arxiv-sized graph asked for a 99 GiB block)."""

from __future__ import annotations

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
