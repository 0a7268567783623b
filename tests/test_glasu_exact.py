"""GLASU's split model is exact where it should be, and lazy where it should be."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fedgl.algorithms.glasu.blocks import build_block, full_block
from fedgl.data.graph import GraphData
from tests.glasu_helpers import glasu_federation, glasu_params
from tests.helpers import random_graph


@pytest.fixture
def float64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def _graph64(nodes: int = 60, seed: int = 1) -> GraphData:
    g = random_graph(nodes=nodes, seed=seed)
    return g.with_features(g.x.double())


def _reference_weights(server, graph):
    """The centralised GCN with the clients' weights: layer 0 block-diagonal (client m's columns
    to its share), later layers the clients' shares side by side; one classifier per client."""
    p = server.p
    weights, biases = [], []
    for layer in range(p.layers):
        d_in = graph.num_features if layer == 0 else p.hidden
        w = torch.zeros(d_in, p.hidden)
        b = torch.zeros(p.hidden)
        for m in server.runtime.client_ids:
            c = server.runtime.local_client(m)
            a, z = p.share(m)
            conv = c.model.convs[layer]
            rows = c.data.columns if layer == 0 else slice(None)
            w[rows, a:z] = conv.weight.detach().t()
            b[a:z] = conv.bias.detach()
        weights.append(w.requires_grad_(True))
        biases.append(b.requires_grad_(True))
    return weights, biases


def _reference_forward(graph, blocks, weights, biases):
    h = graph.x[blocks[0].src]
    outs = []
    for blk, w, b in zip(blocks, weights, biases, strict=True):
        h = torch.relu(torch.sparse.mm(blk.adj, h) @ w + b)
        outs.append(h)
    return outs


def test_concat_K_eq_L_exact_gradients_equal_the_centralised_model(float64):
    graph = _graph64()
    p = glasu_params(graph, clients=2, layers=3, agg="3", aggregate="concat", grad_mode="exact",
                     fanout=-1, lr=1.0, batch_size=5)
    server = glasu_federation(graph, p, edge_share=1.0)
    clients = [server.runtime.local_client(m) for m in (0, 1)]
    before = [c.parameters_dict() for c in clients]
    weights, biases = _reference_weights(server, graph)
    cls = [c.model.classifier for c in clients]

    loss_reported = server.train_round()["train_loss"]
    sets = clients[0].sets
    assert all(torch.equal(clients[1].sets[i], sets[i]) for i in sets)  # full neighbourhoods
    blocks = [build_block(graph.edge_index, graph.num_nodes, sets[i], sets[i + 1])
              for i in range(p.layers)]
    top = _reference_forward(graph, blocks, weights, biases)[-1]
    y = graph.y[sets[p.layers]]
    losses = [F.cross_entropy(F.linear(top, bf["classifier.weight"], bf["classifier.bias"]), y)
              for bf in before]
    total = sum(losses)
    total.backward()
    assert loss_reported == pytest.approx(float(total.detach()) / 2, abs=1e-9)
    for m, c in enumerate(clients):
        after = c.parameters_dict()
        a, z = p.share(m)
        for layer in range(p.layers):
            rows = c.data.columns if layer == 0 else slice(None)
            step = before[m][f"convs.{layer}.weight"] - after[f"convs.{layer}.weight"]
            assert torch.allclose(step, weights[layer].grad[rows, a:z].t(), atol=1e-9)
            bstep = before[m][f"convs.{layer}.bias"] - after[f"convs.{layer}.bias"]
            assert torch.allclose(bstep, biases[layer].grad[a:z], atol=1e-9)
        assert float(before[m]["convs.0.weight"].sub(after["convs.0.weight"]).abs().max()) > 1e-6
    assert cls[0] is not cls[1]

    # full-graph forward (evaluation) equals the centralised forward layer by layer
    server.evaluate()
    weights, biases = _reference_weights(server, graph)
    every = [full_block(graph.edge_index, graph.num_nodes)] * p.layers
    ref = _reference_forward(graph, every, weights, biases)
    for layer in range(p.layers):
        got = torch.cat([c.trace[layer] for c in clients], dim=1)
        assert torch.allclose(got, ref[layer], atol=1e-9)


def test_local_stale_q1_has_the_exact_forward_and_classifier_step_but_not_lower_gradients():
    graph = random_graph(nodes=80, seed=2)
    runs = {}
    for mode in ("exact", "local_stale"):
        p = glasu_params(graph, clients=3, layers=4, agg="2", grad_mode=mode, lr=0.5)
        server = glasu_federation(graph, p, seed=3)
        w0 = server.runtime.local_client(1).parameters_dict()
        loss = server.train_round()["train_loss"]
        w1 = server.runtime.local_client(1).parameters_dict()
        runs[mode] = (loss, {k: w0[k] - w1[k] for k in w0})
    (l_ex, g_ex), (l_st, g_st) = runs["exact"], runs["local_stale"]
    assert l_st == pytest.approx(l_ex, abs=1e-6)  # Agg(Extract(H), H⁺) reproduces H at q=0
    for name in ("classifier.weight", "classifier.bias"):  # depends on H[L] and own loss only
        assert torch.allclose(g_ex[name], g_st[name], atol=1e-6), name
    # last layer: exact sums the M clients' equal loss gradients (identical classifiers at
    # start), the own loss alone gives 1/M of it; lower layers also miss the cross-client paths
    assert torch.allclose(g_ex["convs.3.weight"], 3 * g_st["convs.3.weight"], atol=1e-6)
    assert not torch.allclose(g_ex["convs.0.weight"], 3 * g_st["convs.0.weight"], atol=1e-6)


def _traces(graph: GraphData, agg: str, seed: int = 4) -> list[list[torch.Tensor]]:
    p = glasu_params(graph, clients=3, layers=4, agg=agg, backbone="gcnii")
    server = glasu_federation(graph, p, seed=seed, feature_split="contiguous")
    server.evaluate()
    return [server.runtime.local_client(m).trace for m in range(3)]


@pytest.mark.parametrize("agg, first_moved", [("1", 4), ("2", 2), ("4", 1), ("3,4", 3)])
def test_lazy_aggregation_moves_only_the_layers_after_the_first_aggregation(agg, first_moved):
    graph = random_graph(nodes=90, seed=5)
    x = graph.x.clone()
    x[:, 3:6] += torch.randn(graph.num_nodes, 3)  # client 1's columns (contiguous split 3/3/2)
    base, moved = _traces(graph, agg), _traces(graph.with_features(x), agg)
    # trace = own outputs of layers 1..L, then H[L]; client 0 sees client 1 only via aggregates
    for layer in range(5):
        same = torch.allclose(base[0][layer], moved[0][layer])
        assert same == (layer < first_moved), (agg, layer)
    assert not torch.allclose(base[1][0], moved[1][0])  # the perturbation is real


@pytest.mark.parametrize("backbone", ["gcn", "gat", "gcnii"])
def test_sparse_feature_copy_gives_the_dense_forward(backbone, monkeypatch):
    from fedgl.algorithms.glasu.client import GlasuClient

    graph = random_graph(nodes=70, seed=6)
    x = graph.x * (torch.rand(graph.x.shape) < 0.2)  # mostly zeros
    graph = graph.with_features(x)
    p = glasu_params(graph, clients=2, layers=2, agg="1", backbone=backbone)
    traces = []
    for threshold in (0.0, 1.1):  # never / always sparse
        monkeypatch.setattr(GlasuClient, "SPARSE_BELOW", threshold)
        server = glasu_federation(graph, p)
        assert (server.runtime.local_client(0)._xs is not None) == (threshold > 1)
        loss = server.train_round()["train_loss"]
        server.evaluate()
        traces.append((loss, server.runtime.local_client(0).trace))
    assert traces[0][0] == pytest.approx(traces[1][0], abs=1e-5)
    for a, b in zip(traces[0][1], traces[1][1], strict=True):
        assert torch.allclose(a, b, atol=1e-5)
