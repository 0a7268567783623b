"""GLASU's messages: counts give the paper's QL/K saving, bytes equal a hand count, and no party
holds another's columns or edges."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from fedgl.algorithms.glasu.blocks import Block
from fedgl.data.graph import GraphData
from tests.glasu_helpers import glasu_federation, glasu_params
from tests.helpers import graph_from_edges, random_graph


@pytest.mark.parametrize("K", ["4", "2", "1"])
@pytest.mark.parametrize("Q", [1, 4])
def test_messages_per_update_fall_by_QL_over_K(K, Q):
    graph = random_graph(nodes=60, seed=1)
    M, L, rounds = 3, 4, 2
    server = glasu_federation(graph, glasu_params(graph, clients=M, layers=L, agg=K,
                                                  stale_steps=Q))
    for _ in range(rounds):
        server.train_round()
    k = int(K)
    # per round: K sampling calls, K-1 forward calls, 1 local_updates call; down + up each
    assert server.runtime.ledger.messages("train") == rounds * 2 * (2 * k) * M
    per_update = server.runtime.ledger.messages("train") / (rounds * Q)
    baseline = 2 * (2 * L) * M  # K = L, Q = 1
    assert baseline / per_update == pytest.approx(Q * L / k)


def _path_graph() -> GraphData:
    g = graph_from_edges([(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)], 6, num_features=4)
    train = torch.zeros(6, dtype=torch.bool)
    train[2] = True
    return dataclasses.replace(g, train_mask=train)


@pytest.mark.parametrize("agg, down, up", [
    # K=2: sample(S[2]=[2], top) 8+8 | up S_1[1]=[1,2,3] 24; sample([1,2,3], top) 24+8 | up
    # H⁺[0] 3 rows x 4 floats 48; forward(H[1], k) 48+8 | up H⁺[1] 1x4 16; local_updates(H[2])
    # 16 | up loss 8
    ("2", 16 + 32 + 56 + 16, 24 + 48 + 16 + 8),
    # K=1: sample([2], top) 16 | up H⁺[1] 16; local_updates(H[2]) 16 | up loss 8
    ("1", 16 + 16, 16 + 8),
])
def test_bytes_on_a_path_graph_equal_a_hand_count(agg, down, up):
    graph = _path_graph()
    p = glasu_params(graph, clients=2, layers=2, agg=agg, hidden=4, fanout=-1)
    server = glasu_federation(graph, p, edge_share=1.0)
    led = server.runtime.ledger
    assert led.bytes("pretrain", "up") == 8 and led.bytes("pretrain", "down") == 0  # train ids
    server.train_round()
    for m in (0, 1):
        assert led.bytes("train", "down", m) == down
        assert led.bytes("train", "up", m) == up


def test_exact_mode_adds_one_gradient_exchange_per_aggregation_layer():
    graph = random_graph(nodes=60, seed=2)
    M = 3
    server = glasu_federation(graph, glasu_params(graph, clients=M, agg="2", grad_mode="exact"))
    server.train_round()
    # 2K calls of the forward, backward_top (replacing local_updates), K backward_segment calls
    assert server.runtime.ledger.messages("train") == 2 * (2 * 2 + 2) * M


def test_labels_at_one_client_adds_the_batch_and_one_gradient_broadcast():
    graph = random_graph(nodes=60, seed=3)
    M, hidden = 3, 6
    p = glasu_params(graph, clients=M, agg="2", label_holders="one", stale_steps=2, hidden=hidden)
    server = glasu_federation(graph, p)
    assert server.runtime.ledger.bytes("pretrain") == 0
    out = server.train_round()
    assert out["train_loss"] > 0
    # batch upload and top_gradient (one call each, to client 0), and the 2K protocol calls
    assert server.runtime.ledger.messages("train") == 2 * 2 + 2 * (2 * 2) * M
    others = [server.runtime.local_client(m) for m in (1, 2)]
    assert all(c.model.classifier is None and c.data.y is None for c in others)
    assert server.evaluate()["client_test_acc"].keys() == {"0"}


def _walk(obj, seen=None):
    """(path, tensor) for every tensor reachable from an object's attributes; Blocks apart."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        yield obj.to_dense() if obj.is_sparse else obj
    elif isinstance(obj, Block):
        return
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _walk(v, seen)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from _walk(v, seen)
    elif isinstance(obj, torch.nn.Module):
        yield from obj.state_dict().values()
    elif hasattr(obj, "__dict__") and not isinstance(obj, type | torch.Generator):
        if isinstance(obj, torch.optim.Optimizer):
            yield from _walk(obj.state, seen)
            return
        yield from _walk(vars(obj), seen)


def _blocks(obj, seen=None):
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, Block):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _blocks(v, seen)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from _blocks(v, seen)


def test_a_vertical_client_holds_only_its_columns_and_its_edges():
    graph = random_graph(nodes=80, seed=4)  # Gaussian features: every value is distinct
    p = glasu_params(graph, clients=3, agg="2", stale_steps=2, backbone="gcnii")
    server = glasu_federation(graph, p)
    for _ in range(2):
        server.train_round()
    server.evaluate()
    n = graph.num_nodes
    for m in range(3):
        client = server.runtime.local_client(m)
        own_cols = client.data.columns
        others = torch.ones(graph.num_features, dtype=torch.bool)
        others[own_cols] = False
        foreign = graph.x[:, others].flatten()
        for t in _walk(client):
            if t.is_floating_point() and t.numel():
                assert not bool(torch.isin(t.flatten(), foreign).any()), f"client {m} holds a column"
        own_edges = set((client.data.edge_index[1] * n + client.data.edge_index[0]).tolist())
        assert own_edges < set((graph.edge_index[1] * n + graph.edge_index[0]).tolist())
        csr = client.csr
        dst = torch.repeat_interleave(torch.arange(n), csr.indptr[1:] - csr.indptr[:-1])
        assert set((dst * n + csr.indices).tolist()) == own_edges
        blocks = list(_blocks(vars(client)))
        assert blocks
        for blk in blocks:  # every adjacency entry is an own edge or a self-loop
            r, c = blk.edges
            gd, gs = blk.dst[r], blk.src[c]
            keys = set((gd * n + gs)[gd != gs].tolist())
            assert keys <= own_edges
    # the server holds no graph data: only the training ids it was sent and its generator
    state = {k: v for k, v in vars(server).items() if k != "runtime"}
    tensors = list(_walk(state))
    assert len(tensors) == 1 and tensors[0].dtype == torch.long
