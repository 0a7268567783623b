"""Mini-batch local training of FedGCN/FedAvg (--batch-size, --num-neighbors): with every neighbour
and every training node in the batch a step is the full-batch step; sampling is seeded by
(seed, client, round), so runs repeat and resume exactly; the sampled GCN layer is unbiased."""

from __future__ import annotations

import json

import pytest
import torch

from fedgl.algorithms.fedgcn import FedGCNClient, FedGCNServer
from fedgl.algorithms.runner import run_federated
from fedgl.algorithms.sampled import SampledInputs, gcn_on_block, sampled_fanouts
from fedgl.config import Config
from fedgl.data.graph import GraphData
from fedgl.data.sampling import sample_blocks
from fedgl.errors import ConfigError
from fedgl.models import gcn_edge_weights
from fedgl.progress import RoundProgress
from tests import _cli_helpers
from tests.helpers import (
    fedgcn_federation,
    interrupted_then_resumed,
    random_graph,
    random_partition,
)

cli_fixture = _cli_helpers.cli_fixture  # the `cli` fixture


def _graph(seed: int = 0) -> GraphData:
    """An SBM graph where ~60% of the nodes train (so the batch is a strict subset of own nodes)."""
    g = random_graph(nodes=160, seed=seed)
    train = torch.rand(g.num_nodes, generator=torch.Generator().manual_seed(seed)) < 0.6
    return GraphData(g.name, g.x, g.y, g.edge_index, train, ~train, ~train, g.num_classes)


def _pair(hops: int, model: str = "gcn", variant: str = "eq33", **minibatch):
    """Full-batch and mini-batch federations on the same graph and partition, pre-trained."""
    graph = _graph()
    part = random_partition(graph.num_nodes, 4, seed=1)
    common = {"hops": hops, "model": model, "dropout": 0.0, "lr": 0.5,
              **({"one_hop_variant": variant} if variant != "eq33" else {})}
    full = fedgcn_federation(graph, part, **common)
    mini = fedgcn_federation(graph, part, **common, **minibatch)
    full.pretrain()
    mini.pretrain()
    return full, mini


@pytest.mark.parametrize("hops,model,variant", [(0, "gcn", "eq33"), (1, "gcn", "eq33"),
                                               (1, "gcn", "paper-code"), (2, "gcn", "eq33"),
                                               (0, "sage", "eq33")])
def test_full_fanout_whole_batch_equals_full_batch(hops, model, variant):
    """Same weights in -> same updates out (two local steps), and the same predictions."""
    full, mini = _pair(hops, model, variant, batch_size=10_000)  # num_neighbors: every neighbour
    weights = full.weights
    for k in full.runtime.client_ids:
        a, b = full.runtime.local_client(k), mini.runtime.local_client(k)
        assert b.minibatch and not a.minibatch
        fa, fb = a.fit(weights, 2, round=1), b.fit(weights, 2, round=1)
        assert fa["num_train"] == fb["num_train"] > 0
        assert fb["loss"] == pytest.approx(fa["loss"], abs=1e-6)
        for name in weights:
            assert torch.allclose(fa["weights"][name], fb["weights"][name], atol=1e-6), name
        assert any(not torch.allclose(fb["weights"][n], weights[n]) for n in weights)  # trained
        # bounded-memory full-neighbour inference = the full-batch forward pass
        assert torch.allclose(a.predict(weights), b.predict(weights), atol=1e-5)


def test_fanouts_and_batch_really_sample():
    """A small batch with small fan-outs differs from the full step; the sampled blocks of
    a 1/2-hop client skip the first layer (its aggregation arrived exactly)."""
    full, mini = _pair(2, batch_size=8, num_neighbors="2,3")
    w = full.weights
    a, b = full.runtime.local_client(0), mini.runtime.local_client(0)
    gap = (a.fit(w, 1)["weights"]["convs.0.lin.weight"]
           - b.fit(w, 1)["weights"]["convs.0.lin.weight"]).abs().max()
    assert float(gap) > 1e-4
    # first layer first: a pre-aggregated input layer drops the input-most (last) hop's number
    assert sampled_fanouts([2, 3], 2, pre_aggregated=True) == [2]
    assert sampled_fanouts([2, 3], 2, pre_aggregated=False) == [2, 3]


def _run(graph, cfg, **kwargs):
    return run_federated(graph, cfg, repeat=0, seed=cfg.seed, client_cls=FedGCNClient,
                         server_cls=FedGCNServer, progress=RoundProgress(None), **kwargs)


def _cfg(tmp_path=None, **values) -> Config:
    extra = {"checkpoint_every": 1, "out": str(tmp_path)} if tmp_path is not None else {}
    return Config.from_dict({"progress": False, "dataset": "sbm", "clients": 4, "rounds": 5,
                             "partition": "iid", "batch_size": 12, "num_neighbors": "3,4",
                             "oracle_eval": False, **extra, **values})


@pytest.mark.parametrize("hops", [0, 2])
def test_sampling_is_seeded_and_resumes_exactly(tmp_path, hops):
    """Same seed -> the same run; another seed -> another; an interrupted run resumed from its
    checkpoint ends with the uninterrupted run's history (the sampler state is derived from
    (seed, client, round), nothing of it is checkpointed)."""
    graph = _graph(seed=2)
    cfg = _cfg(tmp_path, hops=hops)
    ref = _run(graph, cfg)
    again = _run(graph, _cfg(hops=hops))
    other = _run(graph, _cfg(hops=hops, seed=5))
    losses = [h["train_loss"] for h in ref.history]
    assert losses == [h["train_loss"] for h in again.history]
    assert losses != [h["train_loss"] for h in other.history]

    resumed = interrupted_then_resumed(_run, graph, cfg, tmp_path, at=3)
    assert [h["train_loss"] for h in resumed.history] == losses
    assert resumed.final["test_acc"] == ref.final["test_acc"]


def test_sampled_gcn_layer_is_unbiased():
    """E[sampled layer] = full layer: the mean over many fan-out-2 samples approaches the exact
    output (the sampled neighbour sum is scaled by deg/m)."""
    torch.manual_seed(0)
    graph = random_graph(nodes=60, seed=7)
    n = graph.num_nodes
    deg = graph.degrees() + 1
    ei, w = gcn_edge_weights(graph.edge_index, n, deg)
    norm = deg.to(torch.float32).pow(-0.5)
    every = torch.arange(n)
    si = SampledInputs.build(graph.x, ei, norm, every, every, graph.y, False)
    from torch_geometric.nn import GCNConv

    conv = GCNConv(graph.num_features, 4, add_self_loops=False, normalize=False)
    with torch.no_grad():
        exact = conv(graph.x, ei, w)
    seeds = torch.arange(0, n, 3)
    gen = torch.Generator().manual_seed(1)
    acc = torch.zeros(seeds.numel(), 4)
    draws = 2000
    with torch.no_grad():
        for _ in range(draws):
            (block,) = sample_blocks(si.csr, seeds, [2], gen)
            acc += gcn_on_block(conv, graph.x[block.src_ids], block, si)
    mean = acc / draws
    err = (mean - exact[seeds]).abs().max()
    assert float(err) < 0.05 * float(exact[seeds].abs().max())
    assert bool((si.csr.degree(seeds) > 2).any())  # the test samples (some nodes have deg > 2)


def test_config_rules():
    with pytest.raises(ConfigError, match="batch-size"):
        Config.from_dict({"algorithm": "fedgcn", "num_neighbors": "10,5"})
    with pytest.raises(ConfigError, match="num_neighbors"):
        Config.from_dict({"algorithm": "fedgcn", "batch_size": 64, "num_neighbors": "10,5,2"})
    Config.from_dict({"algorithm": "fedgcn", "batch_size": 64, "num_neighbors": "10,5"})
    Config.from_dict({"algorithm": "centralized", "batch_size": 64, "num_neighbors": "10,5"})


def test_cli_batch_size_and_num_neighbors(cli, tmp_path):
    out = tmp_path / "run"
    res = cli("run", "--algorithm", "fedgcn", "--hops", "1", "--sbm-nodes", "300",
              "--sbm-features", "16", "--clients", "3", "--rounds", "3", "--batch-size", "256",
              "--num-neighbors", "10,5", "--no-progress", "--out", out)
    assert res.code == 0, res.err
    result = json.loads((out / "result.json").read_text())
    assert result["config"]["batch_size"] == 256 and result["config"]["num_neighbors"] == "10,5"
    assert 0.0 <= result["summary"]["test_acc"]["mean"] <= 1.0
    res = cli("run", "--algorithm", "centralized", "--sbm-nodes", "300", "--sbm-features", "16",
              "--rounds", "2", "--batch-size", "64", "--num-neighbors", "5,5", "--no-progress")
    assert res.code == 0, res.err


def test_csr_from_edge_index_sorted_in_place_and_without_self_loops():
    """The in-place key sort gives the CSR of the (destination, source) order; self-loops can
    be dropped on the way."""
    from fedgl.data.sampling import CSRGraph

    g = torch.Generator().manual_seed(3)
    n = 50
    ei = torch.randint(0, n, (2, 400), generator=g)
    csr = CSRGraph.from_edge_index(ei, n, dtype=torch.int32)
    order = torch.argsort(ei[1] * n + ei[0])
    assert torch.equal(csr.indices.long(), ei[0][order])
    assert torch.equal(csr.indptr.long()[1:], torch.cumsum(torch.bincount(ei[1], minlength=n), 0))
    no_loops = CSRGraph.from_edge_index(ei, n, drop_self_loops=True)
    keep = ei[0] != ei[1]
    ref = CSRGraph.from_edge_index(ei[:, keep], n)
    assert torch.equal(no_loops.indices, ref.indices) and torch.equal(no_loops.indptr, ref.indptr)
    assert int(no_loops.indptr[-1]) == int(keep.sum()) < 400


@pytest.mark.parametrize("hops,model", [(2, "gcn"), (0, "sage")])
def test_inference_chunks_do_not_change_predictions(hops, model):
    """Full-neighbour inference over CSR chunks of a few entries = one chunk."""
    from fedgl.algorithms.sampled import full_inference

    _, mini = _pair(hops, model, batch_size=16)
    client = mini.runtime.local_client(1)
    client.load_weights(mini.weights)
    client.model.eval()
    si = client._sampled_inputs()
    whole = full_inference(client.model, model, si)
    tiny = full_inference(client.model, model, si, chunk_values=7 * si.x.size(1))
    assert whole.shape[0] == client.data.num_nodes
    assert torch.allclose(whole, tiny, atol=1e-5)


@pytest.mark.parametrize("hops", [1, 2])
def test_minibatch_scales_the_received_rows_in_place_once(hops):
    """Mini-batch clients turn the received sums into layer 1's aggregates in place (one copy
    of the rows, not two); a new exchange (a restarted client's re-run) rebuilds them, and
    the step is the same as before."""
    graph = random_graph(nodes=150, seed=4)
    part = random_partition(graph.num_nodes, 3, seed=4)
    server = fedgcn_federation(graph, part, hops=hops, batch_size=8, num_neighbors="3,3", dropout=0.0)
    server.pretrain()
    client = server.runtime.local_client(0)
    raw = client.received_sums.clone()
    first = client.fit(server.weights, local_steps=1, round=1)["weights"]
    assert client.received_sums is None  # consumed into the sampled inputs, not copied
    assert client._sampled.x.data_ptr() != raw.data_ptr()
    with pytest.raises(RuntimeError, match="consumed by the mini-batch inputs"):
        client.model_inputs()
    server.pretrain()  # the exchange again: fresh rows, fresh inputs
    assert torch.equal(client.received_sums, raw)
    again = client.fit(server.weights, local_steps=1, round=1)["weights"]
    assert all(torch.equal(first[k], again[k]) for k in first)


def _all_rows_inference(model: torch.nn.Module, si: SampledInputs) -> torch.Tensor:
    """Reference: every GCN layer on every row (CSR order, one chunk), then the own rows."""
    h = si.x
    norm = si.norm
    dst = torch.repeat_interleave(torch.arange(si.csr.num_nodes),
                                  (si.csr.indptr[1:] - si.csr.indptr[:-1]).long())
    src = si.csr.indices.long()
    for i, conv in enumerate(model.convs):
        if i == 0 and si.pre_aggregated:
            h = conv.lin(h) + conv.bias
        else:
            hw = conv.lin(h)
            out = hw * (norm * norm).unsqueeze(1)
            out.index_add_(0, dst, hw[src] * (norm[src] * norm[dst]).unsqueeze(1))
            h = out + conv.bias
        if i < len(model.convs) - 1:
            h = torch.relu(h)
    return torch.log_softmax(h[si.own_rows], dim=-1)


@pytest.mark.parametrize("hops,layers", [(0, 2), (1, 2), (2, 2), (2, 3)])
def test_inference_last_layer_on_own_rows_is_bitwise_the_all_rows_pass(hops, layers):
    """The last GCN layer is computed for the own rows only (a 2-hop client's rows
    V_k ∪ N(V_k) are several times its own): bitwise the rows of the pass over every row, for
    any chunk size, and for own rows that are not a prefix of the rows."""
    from fedgl.algorithms.sampled import full_inference

    fans = ",".join(["3"] * layers)
    _, mini = _pair(hops, batch_size=16, layers=layers, num_neighbors=fans)
    for k in mini.runtime.client_ids:
        client = mini.runtime.local_client(k)
        client.load_weights(mini.weights)
        client.model.eval()
        si = client._sampled_inputs()
        ref = _all_rows_inference(client.model, si)
        for chunk in (1 << 22, 7 * si.x.size(1), 1):
            assert torch.equal(full_inference(client.model, "gcn", si, chunk_values=chunk), ref)
        n = si.x.size(0)
        scattered = torch.randperm(n, generator=torch.Generator().manual_seed(k))[:max(1, n // 3)]
        other = SampledInputs(si.x, si.csr, si.norm, scattered, si.train_rows, si.y_train,
                              si.pre_aggregated)
        ref = _all_rows_inference(client.model, other)
        assert torch.equal(full_inference(client.model, "gcn", other, chunk_values=50), ref)
        assert ref.shape[0] == scattered.numel()


@pytest.mark.parametrize("hops,variant", [(2, "eq33"), (1, "paper-code")])
def test_neighbour_row_inputs_built_from_keys_equal_the_edge_list_path(hops, variant):
    """2-hop and 1-hop paper-code mini-batch inputs are read off sorted edge keys, without the
    weighted edge list of ``model_inputs``: the same rows, CSR (dtype included), normalisation
    and training rows as the edge-list path."""
    from fedgl.algorithms.base import GNNClient

    _, lean = _pair(hops, variant=variant, batch_size=16)
    _, listed = _pair(hops, variant=variant, batch_size=16)
    for k in lean.runtime.client_ids:
        a, b = lean.runtime.local_client(k), listed.runtime.local_client(k)
        sa = a._sampled_inputs()
        b._lean_sampled_inputs = lambda: None  # this client builds from model_inputs()
        sb = GNNClient._sampled_inputs(b)
        assert sa.csr.indptr.dtype == sb.csr.indptr.dtype == torch.int32
        assert torch.equal(sa.csr.indptr, sb.csr.indptr)
        assert torch.equal(sa.csr.indices, sb.csr.indices)
        for f in ("x", "norm", "own_rows", "train_rows", "y_train"):
            assert torch.equal(getattr(sa, f), getattr(sb, f)), f
        assert sa.pre_aggregated and sb.pre_aggregated
        assert sa.x.size(0) > a.data.num_nodes  # remote rows present
