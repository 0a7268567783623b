"""Batched local training of GCN clients (fedgl/algorithms/batched.py) reproduces every
client's own ``fit``; the runtime counts the same messages."""

from __future__ import annotations

import pytest
import torch

import fedgl
from fedgl.algorithms.fedgcn.client import FedGCNClient
from fedgl.algorithms.fedgcn.server import FedGCNServer
from fedgl.algorithms.runner import build_federation
from fedgl.api import as_config, load_graph
from fedgl.data.shards import make_partition
from tests.helpers import assert_fit_many_matches_fit, assert_same_run

SBM = dict(dataset="sbm", sbm_nodes=240, sbm_classes=3, sbm_features=16, clients=4, beta=1.0,
           progress=False)


def _clients(**over):
    cfg = as_config(**{**SBM, **over})
    graph = load_graph(cfg)
    server = build_federation(graph, make_partition(graph, cfg, 0), cfg, 0, FedGCNClient,
                              FedGCNServer)
    server.pretrain()
    return server, [server.runtime.local_client(k) for k in server.runtime.client_ids]


@pytest.mark.parametrize("over", [dict(hops=0), dict(hops=1), dict(hops=2),
                                  dict(hops=2, layers=3, dropout=0.0)],
                         ids=["0-hop", "1-hop", "2-hop", "2-hop-3-layers-no-dropout"])
def test_fit_many_equals_each_clients_own_fit(over):
    server, clients = _clients(**over)
    w = server.weights
    assert_fit_many_matches_fit(FedGCNClient, clients, w, 3, round=3)


def test_fit_many_declines_sage_and_encrypted_models():
    _, clients = _clients(hops=0, model="sage")
    assert FedGCNClient.fit_many(clients, {}, 1) is None
    _, clients = _clients(hops=0, encrypt_models=True, oracle_eval=False)
    assert FedGCNClient.fit_many(clients, {}, 1) is None


@pytest.mark.parametrize("hops", [0, 2])
def test_runs_with_and_without_batching_agree(hops):
    base = dict(SBM, algorithm="fedgcn", hops=hops, rounds=8, eval_every=2, clients=6)
    assert_same_run(fedgl.run(**base, batch_clients=True).repeats[0],
                    fedgl.run(**base, batch_clients=False).repeats[0])


@pytest.mark.parametrize("over", [dict(hops=0), dict(hops=2), dict(hops=0, model="sage")],
                         ids=["0-hop", "2-hop", "sage"])
def test_evaluate_many_equals_each_clients_own_evaluate(over):
    server, clients = _clients(**over)
    w = {k: v + 0.01 * torch.randn_like(v) for k, v in server.weights.items()}
    many = FedGCNClient.evaluate_many(clients, w)
    assert many == [c.evaluate(w) for c in clients]
    assert sum(m["total"][2] for m in many) > 0


@pytest.mark.parametrize("over", [dict(hops=1), dict(hops=2), dict(hops=2, sbm_features=300)],
                         ids=["1-hop", "2-hop", "2-hop-300-features"])
def test_shared_rows_give_each_clients_own_predictions_bit_for_bit(over):
    """Received rows repeat across clients: the batched evaluation multiplies each distinct row
    once, and every client's log-probabilities are still those of its own ``predict``."""
    from fedgl.algorithms.batched import Blocks, predict_gnn_clients

    server, clients = _clients(**over)
    w = {k: v + 0.01 * torch.randn_like(v) for k, v in server.weights.items()}
    cache: dict = {}
    many = predict_gnn_clients(clients, w, cache)
    for c, lp in zip(clients, many, strict=True):
        assert torch.equal(lp, c.predict(w))
    blocks = cache["evaluate"][1]
    assert isinstance(blocks, Blocks)
    rows, index = blocks.distinct_x()
    assert torch.equal(rows[index], blocks.x_all)
    assert rows.size(0) < blocks.x_all.size(0)  # rows were shared


def test_colliding_row_hashes_leave_every_row_its_own(monkeypatch):
    """Should two different rows share a hash, no row is shared: the predictions stay exact."""
    import numpy as np

    from fedgl.algorithms import batched

    monkeypatch.setattr(batched, "_row_hashes", lambda bits, step: np.zeros(len(bits), np.uint64))
    server, clients = _clients(hops=2)
    w = {k: v + 0.01 * torch.randn_like(v) for k, v in server.weights.items()}
    cache: dict = {}
    many = batched.predict_gnn_clients(clients, w, cache)
    for c, lp in zip(clients, many, strict=True):
        assert torch.equal(lp, c.predict(w))
    rows, index = cache["evaluate"][1].distinct_x()
    assert torch.equal(index, torch.arange(rows.size(0)))


@pytest.mark.parametrize("layers", [2, 3])
def test_gcn_scores_distinct_rows_and_only_the_returned_rows_bit_for_bit(layers):
    """In evaluation the rows stay distinct until an aggregation reads them, and the last layer
    sums only the edges into ``out_rows``: the same floats as the plain forward pass."""
    from fedgl.algorithms.batched import BlockInput, Blocks
    from fedgl.models.gcn import GCN

    torch.manual_seed(0)
    rows = torch.randn(30, 12)
    index = torch.randint(0, 30, (90,))
    x = rows[index]
    edges = torch.randint(0, 90, (2, 400))
    weight = torch.rand(400)
    out_rows = torch.randperm(90)[:40]
    blocks = Blocks([BlockInput(x, {"edge_index": edges}, out_rows, torch.zeros(40).long(),
                                weight)])
    model = GCN(12, 16, 5, layers=layers).eval()
    plain = model(x, edges, weight, pre_aggregated=True, out_rows=out_rows)
    fast = model(x, edges, weight, pre_aggregated=True, out_rows=out_rows,
                 distinct=(rows, index), out_edges=blocks.out_edges())
    assert torch.equal(fast, plain)
    assert torch.equal(model(x, edges, weight, out_rows=out_rows, out_edges=blocks.out_edges()),
                       model(x, edges, weight, out_rows=out_rows))
    kept, _ = blocks.out_edges()
    assert kept.size(1) == int(torch.isin(edges[1], out_rows).sum()) < 400
    repeated = Blocks([BlockInput(x, {"edge_index": edges}, torch.tensor([3, 3]),
                                  torch.zeros(2).long(), weight)])
    assert repeated.out_edges() is None


def test_sparse_inputs_train_through_one_block_diagonal_product(data_root):
    """Cora's received rows are sparse (5–7 % non-zero): the K clients' first products and their
    weight gradients run as one block-diagonal CSR product each, and every client still gets
    its own ``fit``; the same products as the K dense ones, up to summation order."""
    from fedgl.algorithms.batched import Blocks, ClientLinear

    server, clients = _clients(dataset="cora", data_root=str(data_root), clients=10, hops=2,
                               beta=10000.0)
    assert_fit_many_matches_fit(FedGCNClient, clients, server.weights, 3, round=1)
    blocks = Blocks([_fit_block(c) for c in clients])
    assert blocks.sparse_block_diagonal() is not None
    torch.manual_seed(0)
    w = torch.randn(blocks.k, 16, blocks.x[0].size(1))
    g = torch.randn(blocks.total, 16)
    linear = ClientLinear(blocks, w)
    assert linear._sparse(blocks.x) is not None
    parts = blocks.split(g)
    dense_out = torch.cat([x @ wk.t() for x, wk in zip(blocks.x, w, strict=True)])
    dense_grad = torch.stack([gk.t() @ x for gk, x in zip(parts, blocks.x, strict=True)])
    assert torch.allclose(linear.forward(blocks.x), dense_out, atol=1e-4)
    assert torch.allclose(linear.weight_grad(g, blocks.x), dense_grad, atol=1e-4)
    # a dense input (or a layer's computed inputs) keeps the K dense products
    assert linear._sparse(list(blocks.x)) is None


def _fit_block(client):
    from fedgl.algorithms.batched import BlockInput

    inp = client._train_inputs()
    train = client._masks["train"].nonzero().flatten()
    return BlockInput(inp.x, {"edge_index": inp.edge_index}, inp.own_rows, client._y[train],
                      inp.edge_weight)


def test_a_transposed_first_weight_trains_to_the_same_floats(data_root):
    """Stored ``[K, in, out]`` where it multiplies sparse inputs (no transposing copy a step),
    the first layer's weight ends every client's round with the same floats as stored
    ``[K, out, in]``; the states handed back are contiguous either way."""
    from fedgl.algorithms.batched import Blocks, fit_stacked, gcn_step

    server, clients = _clients(dataset="cora", data_root=str(data_root), clients=10, hops=2,
                               beta=10000.0)
    blocks = Blocks([_fit_block(c) for c in clients])
    step = gcn_step(clients[0].model, clients[0]._cached_inputs().pre_aggregated)
    assert step.transposed(blocks) == ("convs.0.lin.weight",)

    def plain(*args):
        return step(*args)

    results = {}
    for name, s in (("transposed", step), ("plain", plain)):
        results[name] = fit_stacked(clients, server.weights, 3, 1, blocks, s)
    for a, b in zip(results["transposed"], results["plain"], strict=True):
        assert a["loss"] == b["loss"]
        for key in a["weights"]:
            assert a["weights"][key].is_contiguous()
            assert torch.equal(a["weights"][key], b["weights"][key]), key


def test_each_client_model_holds_its_own_result_after_a_batched_fit():
    """A batched round leaves each client's result held, copied into its model on first use:
    its model then holds exactly its result, as after its own ``fit``; a global model loaded
    before that replaces it."""
    server, clients = _clients(hops=2)
    outs = FedGCNClient.fit_many(clients, server.weights, 2, 1)
    assert outs is not None
    for c, out in zip(clients, outs, strict=True):
        assert c._held is not None
        got = c.get_weights()
        assert c._held is None
        assert all(torch.equal(got[k], out["weights"][k]) for k in got)
    FedGCNClient.fit_many(clients, server.weights, 2, 2)
    clients[0].load_weights(server.weights)
    assert clients[0]._held is None
    got = clients[0].get_weights()
    assert all(torch.equal(got[k], server.weights[k]) for k in got)


def test_per_client_keep_draws_each_clients_own_mask():
    """The batched dropout mask: client k's rows are exactly the mask its own generator gives
    (``keep_mask`` on its rows alone), and each generator ends in the same state."""
    from fedgl.algorithms.batched import BlockInput, Blocks, per_client_keep
    from fedgl.models.base import keep_mask

    sizes = [5, 0, 17, 3]
    blocks = Blocks([BlockInput(torch.zeros(n, 4), {"edge_index": torch.zeros(2, 0).long()},
                                torch.arange(n), torch.zeros(n).long(), None) for n in sizes])
    h = torch.randn(sum(sizes), 9)
    gens = [torch.Generator().manual_seed(s) for s in (1, 2, 3, 4)]
    refs = [torch.Generator().manual_seed(s) for s in (1, 2, 3, 4)]
    got = per_client_keep(h, blocks, 0.5, gens)
    want = torch.cat([keep_mask(part, 0.5, g)
                      for part, g in zip(h.split(sizes), refs, strict=True)])
    assert got.dtype == h.dtype and torch.equal(got, want.to(h.dtype))
    assert all(torch.equal(a.get_state(), b.get_state()) for a, b in zip(gens, refs, strict=True))
