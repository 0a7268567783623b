"""Small graphs and federations the tests build themselves."""

from __future__ import annotations

import numpy as np
import torch

from fedgl.algorithms.fedgcn import FedGCNClient, FedGCNServer
from fedgl.algorithms.runner import build_federation
from fedgl.config import Config
from fedgl.data.graph import GraphData, clean_edge_index
from fedgl.data.partition import Partition
from fedgl.data.sbm import stochastic_block_model


def graph_from_edges(edges: list[tuple[int, int]], num_nodes: int, num_features: int = 3,
                     num_classes: int = 2, seed: int = 0) -> GraphData:
    g = torch.Generator().manual_seed(seed)
    ei = torch.tensor(edges, dtype=torch.long).t() if edges else torch.empty(2, 0, dtype=torch.long)
    y = torch.arange(num_nodes) % num_classes
    every = torch.ones(num_nodes, dtype=torch.bool)
    return GraphData("hand", torch.randn(num_nodes, num_features, generator=g), y,
                     clean_edge_index(ei, num_nodes), every, every.clone(), every.clone(),
                     num_classes)


def random_graph(nodes: int = 120, seed: int = 0) -> GraphData:
    """An SBM graph with Gaussian (hence unique, signed) features and every node labelled."""
    g = stochastic_block_model(nodes=nodes, classes=3, alpha=0.08, mu=0.3, features=8, seed=seed)
    every = torch.ones(nodes, dtype=torch.bool)
    return GraphData(g.name, g.x, g.y, g.edge_index, every, every.clone(), every.clone(), 3)


def random_partition(num_nodes: int, clients: int, seed: int = 0) -> Partition:
    rng = np.random.default_rng(seed)
    owner = rng.permutation(np.arange(num_nodes) % clients)
    return Partition(owner.astype(np.int64), clients)


def fedgcn_federation(graph: GraphData, part: Partition, **cfg_values) -> FedGCNServer:
    cfg = Config.from_dict({"clients": part.num_clients, "progress": False, **cfg_values})
    return build_federation(graph, part, cfg, 0, FedGCNClient, FedGCNServer)


def assert_fit_many_matches_fit(client_cls, clients, weights, steps: int, round: int) -> None:
    """``client_cls.fit_many`` gives every client the result of its own ``fit``: same weights,
    loss and training-node count; and training really moved the model."""
    import pytest

    batched = client_cls.fit_many(clients, weights, steps, round=round)
    assert batched is not None
    for client, got in zip(clients, batched, strict=True):
        own = client.fit(weights, steps, round=round)
        assert got["num_train"] == own["num_train"] > 0
        assert got["loss"] == pytest.approx(own["loss"], abs=1e-6)
        for name, value in own["weights"].items():
            assert torch.allclose(got["weights"][name], value, atol=1e-6), name
        assert not torch.allclose(own["weights"]["convs.0.lin.weight"],
                                  weights["convs.0.lin.weight"])


def assert_same_run(a, b, tol: float = 1e-5) -> None:
    """Two repeats sent the same bytes and have the same history within ``tol``."""
    import pytest

    assert a.ledger["bytes"] == b.ledger["bytes"]
    for ra, rb in zip(a.history, b.history, strict=True):
        assert ra.keys() == rb.keys()
        for key, value in rb.items():
            assert ra[key] == pytest.approx(value, abs=tol), (ra["round"], key)


def interrupt_at(round_: int, repeat: int | None = None):
    """An ``on_round`` hook that stops a run like Ctrl-C after ``round_`` (of ``repeat``, or of
    any repeat): the stop half of every stop-and-resume test."""
    def hook(r: int, t: int, server: object) -> None:
        if t == round_ and (repeat is None or r == repeat):
            raise KeyboardInterrupt
    return hook


def interrupted_then_resumed(run, graph, cfg, out, at: int):
    """``run(graph, cfg, **kw)`` checkpointing every round into ``out``, stopped after round
    ``at`` (the checkpoint must say so), then resumed from that checkpoint: the resumed result."""
    import pytest

    from fedgl.checkpoint import Checkpointer, load_checkpoint

    with pytest.raises(KeyboardInterrupt):
        run(graph, cfg, checkpointer=Checkpointer(out, cfg.to_dict(), 1), on_round=interrupt_at(at))
    progress = load_checkpoint(out).progress
    assert progress.round == at
    return run(graph, cfg, resume_from=progress)
