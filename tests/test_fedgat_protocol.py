"""FedGAT's protocol backend equals the fast backend and the centralised approximated GAT; the
pre-training round's bytes are counted by hand; the memory guard and the degree cap."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch

from fedgl.algorithms.fedgat import (
    FedGATClient,
    FedGATServer,
    GATOracle,
    cap_in_degree,
    gat_initial_weights,
)
from fedgl.algorithms.runner import build_federation
from fedgl.config import Config
from fedgl.data.partition import Partition
from fedgl.errors import DataError
from fedgl.models.gat import add_self_loops
from tests.helpers import graph_from_edges, random_graph, random_partition

F64, I64 = 8, 8


def fedgat_federation(graph, part, *, sharp: bool = True, **cfg_values):
    """A FedGAT federation after pre-training; ``sharp`` scales the initial attention vectors
    up so that the scores are far from uniform (and the cap is active)."""
    cfg = Config.from_dict({"algorithm": "fedgat", "clients": part.num_clients,
                            "min_client_size": 1, "progress": False, "dropout": 0.0,
                            **cfg_values})
    init = gat_initial_weights(cfg, graph.num_features, graph.num_classes, 0)
    if sharp:
        g = torch.Generator().manual_seed(5)
        for k in init:
            if "att" in k:
                init[k] = torch.randn(init[k].shape, generator=g) * 2
    server = build_federation(graph, part, cfg, 0, FedGATClient,
                              partial(FedGATServer, gat_weights=init, seed=0))
    server.pretrain()
    return server


def _graph64(nodes=60, seed=1):
    g = random_graph(nodes=nodes, seed=seed)
    return g.with_features(g.x.double())


def _central_first_layer(server, graph):
    """Layer 1 of the approximated GAT on the full graph (outside the federation)."""
    oracle = GATOracle(graph, server.config, 0, approximate=True)
    ref = server.weights
    oracle.model.load_state_dict({k: v.double() for k, v in ref.items()})
    with torch.no_grad():
        return oracle.model.first_layer(oracle.x, oracle.edge_index)


def _client_first_layer(client, weights):
    """(global ids, layer-1 outputs) of the rows a client computes layer 1 for."""
    client.load_weights(weights)
    with torch.no_grad():
        h = client.first_layer(client.view())
    ids = torch.cat([client.data.node_ids, client.remote_rows])
    return ids, h


PROTOCOL_VARIANTS = [
    {},
    {"fedgat_send_p": False},
    {"fedgat_basis": "chebyshev"},
    {"vec_fedgat": True},
    {"fedgat_psi": "smooth", "degree": 8},
]


@pytest.mark.parametrize("variant", PROTOCOL_VARIANTS, ids=lambda v: ",".join(v) or "default")
def test_protocol_and_fast_first_layers_agree(variant):
    graph = _graph64()
    part = random_partition(graph.num_nodes, 3, seed=1)
    proto = fedgat_federation(graph, part, fedgat_backend="protocol", **variant)
    fast = fedgat_federation(graph, part, fedgat_backend="fast",
                             **{k: v for k, v in variant.items() if k != "vec_fedgat"})
    central = _central_first_layer(proto, graph)
    worst = worst_fast = 0.0
    for k in proto.runtime.client_ids:
        pc, fc = proto.runtime.local_client(k), fast.runtime.local_client(k)
        ids, h = _client_first_layer(pc, proto.weights)
        fids, fh = _client_first_layer(fc, proto.weights)
        pos = {int(g): i for i, g in enumerate(fids)}
        h_fast = fh[[pos[int(g)] for g in ids]]
        worst = max(worst, float((h - h_fast).abs().max()))
        worst_fast = max(worst_fast, float((h - central[ids]).abs().max()))
    assert worst < 1e-8
    assert worst_fast < 1e-8
    assert float(central.abs().max()) > 0.1  # not a trivially small output


@pytest.mark.parametrize("backend", ["fast", "protocol"])
@pytest.mark.parametrize("layers", [2, 3])
def test_client_outputs_equal_the_centralised_approximated_gat(backend, layers):
    graph = _graph64(seed=2)
    part = random_partition(graph.num_nodes, 4, seed=2)
    server = fedgat_federation(graph, part, fedgat_backend=backend, layers=layers)
    central = GATOracle(graph, server.config, 0, approximate=True).logits(server.weights)
    for k in server.runtime.client_ids:
        client = server.runtime.local_client(k)
        local = client.predict(server.weights)
        assert float((local - central[client.data.node_ids]).abs().max()) < 1e-8


def test_a_training_step_is_the_same_in_both_backends():
    graph = _graph64(seed=3)
    part = random_partition(graph.num_nodes, 3, seed=3)
    out = {}
    for backend in ("fast", "protocol"):
        server = fedgat_federation(graph, part, fedgat_backend=backend)
        out[backend] = server.runtime.local_client(1).fit(server.weights, local_steps=2)
    for key, value in out["fast"]["weights"].items():
        assert torch.allclose(value, out["protocol"]["weights"][key], atol=1e-8), key
    assert out["fast"]["loss"] == pytest.approx(out["protocol"]["loss"], abs=1e-10)


def test_degree_cap_is_consistent_everywhere():
    graph = _graph64(nodes=80, seed=4)
    part = random_partition(graph.num_nodes, 3, seed=4)
    capped = cap_in_degree(graph.edge_index, 3, seed=0)
    assert int(torch.bincount(capped[1]).max()) <= 3
    assert capped.size(1) < graph.edge_index.size(1)
    # a node's kept in-edges depend only on its own in-edges (each party computes the same)
    sub = graph.edge_index[:, graph.edge_index[1] < 40]
    assert torch.equal(cap_in_degree(sub, 3, 0), capped[:, capped[1] < 40])
    server = fedgat_federation(graph, part, fedgat_backend="protocol", fedgat_max_degree=3)
    central = GATOracle(graph, server.config, 0, approximate=True).logits(server.weights)
    for k in server.runtime.client_ids:
        client = server.runtime.local_client(k)
        assert float((client.predict(server.weights)
                      - central[client.data.node_ids]).abs().max()) < 1e-8
    assert server.pretrain_stats["max_node_mb"] * 2**20 < 200_000  # m <= 8


def test_memory_guard_refuses_a_large_node_and_names_the_fix():
    graph = _graph64()
    part = random_partition(graph.num_nodes, 2, seed=0)
    with pytest.raises(DataError, match="fedgat-backend fast"):
        fedgat_federation(graph, part, fedgat_backend="protocol", fedgat_node_mb=0.001)
    # the fast backend plans the same node sizes but builds no matrices
    server = fedgat_federation(graph, part, fedgat_backend="fast", fedgat_node_mb=0.001)
    assert server.pretrain_stats["max_node_mb"] > 0.001


# ------------------------------------------------------------------- bytes, counted by hand
def _path():
    """0-1-2-3, d = 2, x = [1,0],[2,0],[0,3],[0,4]; client 0 owns {0,1}, client 1 owns {2,3}.

    Closed neighbourhoods Ñ0={0,1} Ñ1={0,1,2} Ñ2={1,2,3} Ñ3={2,3}: m = 2|Ñ| = 4, 6, 6, 4.
    Non-zero feature slices S2 (features non-zero on some j ∈ Ñ_i): 1, 2, 2, 1; S1 = 1 each.
    Layer-1 rows (L = 2): client 0 {0, 1, 2}, client 1 {1, 2, 3}."""
    graph = graph_from_edges([(0, 1), (1, 2), (2, 3)], 4, num_features=2)
    graph = graph.with_features(torch.tensor([[1.0, 0], [2, 0], [0, 3], [0, 4]],
                                             dtype=torch.float64))
    return graph, Partition(np.array([0, 0, 1, 1]), 2)


# upload per client: 2 ids + 2x2 features + 3 in-edges (2 ids each)
UPLOAD = 2 * (2 * I64 + 4 * F64 + 3 * 2 * I64)


def test_protocol_bytes_by_hand():
    graph, part = _path()
    server = fedgat_federation(graph, part, fedgat_backend="protocol", gat_features="none")
    led = server.runtime.ledger
    # own node sent P: K1 m + K2 m·S2 + M2 S2·m² + P m² values, id + S2 indices
    own4, own6 = 4 + 4 + 16 + 16, 6 + 12 + 72 + 36
    # remote node: M1 slices (S1 = 1) instead of P, with their indices
    remote6 = 6 + 12 + 72 + 36
    values = (own4 + own6 + remote6) * 2
    ids = (2 + 3 + 4) * 2
    graph_call = 2 * I64  # each client: the id of its one remote row, no edges (L = 2)
    assert led.bytes("pretrain", "up") == UPLOAD
    assert led.bytes("pretrain", "down") == values * F64 + ids * I64 + graph_call
    assert server.pretrain_stats["protocol_bytes"] == values * F64 + ids * I64
    # the paper's dense count: 2 d m² + m + m d per (client, node)
    assert server.pretrain_stats["paper_scalars"] == 2 * ((2 * 2 * 16 + 4 + 8)
                                                          + 2 * (2 * 2 * 36 + 6 + 12))
    # upload, graph, one chunk of matrices: a request and a reply per client each
    assert led.messages("pretrain") == 12


def test_paper_messages_without_the_projector_shortcut():
    graph, part = _path()
    server = fedgat_federation(graph, part, fedgat_backend="protocol", gat_features="none",
                               fedgat_send_p=False)
    m1 = (4 + 4 + 16 + 16) + 2 * (6 + 12 + 72 + 36)  # every node as a remote one (S1 = 1)
    ids = (3 + 4 + 4) * 2
    assert server.runtime.ledger.bytes("pretrain", "down") == 2 * m1 * F64 + ids * I64 + 2 * I64


def test_vector_fedgat_bytes_by_hand():
    graph, part = _path()
    server = fedgat_federation(graph, part, fedgat_backend="protocol", gat_features="none",
                               vec_fedgat=True)
    # per node: M1, M2 (d x g), K1 (g x d), mask4 (g x g), K3 (g), g = m; plus its id
    g4, g6 = 3 * 2 * 4 + 16 + 4, 3 * 2 * 6 + 36 + 6
    values = 2 * (g4 + 2 * g6)
    assert server.runtime.ledger.bytes("pretrain", "down") == values * F64 + 6 * I64 + 2 * I64
    assert server.pretrain_stats["protocol_bytes"] == values * F64 + 6 * I64
    # every run plans the vector variant's bytes too (the communication sweep reports them)
    matrix = fedgat_federation(graph, part, fedgat_backend="fast", gat_features="none")
    assert matrix.pretrain_stats["vector_protocol_bytes"] == values * F64 + 6 * I64


def test_fast_backend_bytes_by_hand():
    graph, part = _path()
    server = fedgat_federation(graph, part, fedgat_backend="fast", gat_features="none")
    # client 0: remote rows {2, 3} (2-hop), their features, the 2 edges into node 2 (1->2, 3->2)
    per_client = 2 * I64 + 2 * 2 * F64 + 2 * 2 * I64
    assert server.runtime.ledger.bytes("pretrain", "down") == 2 * per_client
    assert server.runtime.ledger.bytes("pretrain", "up") == UPLOAD


def test_protocol_ledger_matches_planned_sizes_on_a_random_graph():
    graph = _graph64(nodes=70, seed=6)
    part = random_partition(graph.num_nodes, 4, seed=6)
    server = fedgat_federation(graph, part, fedgat_backend="protocol")
    led = server.runtime.ledger
    graph_bytes = sum(
        server.runtime.local_client(k).remote_rows.numel() * I64 for k in range(4))
    assert led.bytes("pretrain", "down") == server.pretrain_stats["protocol_bytes"] + graph_bytes
    assert led.bytes("pretrain", "up") == (graph.num_nodes * (graph.num_features * F64 + I64)
                                           + graph.edge_index.size(1) * 2 * I64)


def test_self_loops_helper():
    ei = add_self_loops(torch.tensor([[0], [1]]), 3)
    assert ei.tolist() == [[0, 0, 1, 2], [1, 0, 1, 2]]
