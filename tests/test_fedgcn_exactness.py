"""FedGCN 2-hop is the centralised GCN: same weights, same logits on every client's own nodes."""

from __future__ import annotations

import pytest
import torch

from fedgl.api import load_graph
from fedgl.config import Config
from fedgl.data.partition import dirichlet_partition
from fedgl.evaluation import OracleEvaluator
from fedgl.models import gcn_edge_weights
from tests.helpers import fedgcn_federation, random_graph, random_partition


def _max_gap_to_centralised(graph, part, **cfg_values) -> float:
    server = fedgcn_federation(graph, part, **cfg_values)
    server.pretrain()
    weights = server.weights
    central = OracleEvaluator(graph, server.config).logits(weights)
    gap = 0.0
    for k in server.runtime.client_ids:
        client = server.runtime.local_client(k)
        local = client.predict(weights)
        gap = max(gap, float((local - central[client.data.node_ids]).abs().max()))
    return gap


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_two_hop_equals_centralised_on_random_graph(seed):
    graph = random_graph(nodes=150, seed=seed)
    part = random_partition(graph.num_nodes, 5, seed=seed)
    assert _max_gap_to_centralised(graph, part, hops=2) < 1e-5


def test_two_hop_equals_centralised_on_cora_ten_clients(data_root):
    cfg = Config(dataset="cora", data_root=str(data_root))
    graph = load_graph(cfg)
    part = dirichlet_partition(graph.y, 10, 1.0, seed=0)
    assert _max_gap_to_centralised(graph, part, hops=2) < 1e-5


def test_deeper_gcn_is_not_exact_but_first_layer_is():
    """A 3-layer GCN with 2-hop runs layers 2-3 on the received subgraph, an approximation."""
    graph = random_graph(nodes=150, seed=3)
    part = random_partition(graph.num_nodes, 5, seed=3)
    assert _max_gap_to_centralised(graph, part, hops=2, layers=3) > 1e-4


@pytest.mark.parametrize("hops", [1, 2])
def test_received_first_layer_aggregates_are_exact(hops):
    """Layer 1 input of every client's own nodes is the global (ÂX) row."""
    graph = random_graph(nodes=100, seed=4)
    part = random_partition(graph.num_nodes, 4, seed=4)
    ei, w = gcn_edge_weights(graph.edge_index, graph.num_nodes, graph.degrees() + 1)
    ax = torch.zeros_like(graph.x).index_add_(0, ei[1], graph.x[ei[0]] * w.unsqueeze(1))
    server = fedgcn_federation(graph, part, hops=hops)
    server.pretrain()
    for k in server.runtime.client_ids:
        client = server.runtime.local_client(k)
        inp = client.model_inputs()
        own = inp.x[inp.own_rows]
        assert torch.allclose(own, ax[client.data.node_ids], atol=1e-6)


def test_one_hop_differs_from_centralised_when_edges_are_cut():
    graph = random_graph(nodes=150, seed=5)
    part = random_partition(graph.num_nodes, 5, seed=5)
    assert part.cross_client_edges(graph.edge_index) > 0
    assert _max_gap_to_centralised(graph, part, hops=1) > 1e-4


def test_single_client_zero_hop_equals_centralised():
    import numpy as np

    from fedgl.data.partition import Partition

    graph = random_graph(nodes=80, seed=6)
    part = Partition(np.zeros(graph.num_nodes, dtype=np.int64), 1)
    assert _max_gap_to_centralised(graph, part, hops=0, min_client_size=1) < 1e-5
