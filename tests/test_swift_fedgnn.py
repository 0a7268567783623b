"""Swift-FedGNN: the server-mediated cross-client computation is exact, the schedules reduce to
their baselines, and every byte is counted (a hand count on a tiny graph)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

import fedgl.algorithms.minibatch.server as server_mod
from fedgl.algorithms.minibatch.client import MiniBatchClient
from fedgl.algorithms.minibatch.server import FedSGDServer, PeriodicSchedule, Step
from fedgl.algorithms.minibatch.settings import MiniBatchSettings
from fedgl.data.client_data import split_graph
from fedgl.data.partition import Partition
from fedgl.data.sampling import full_block
from fedgl.federation.runtime import LocalRuntime
from fedgl.models import build_model
from fedgl.models.blocks import aggregation_kind, block_forward
from tests.helpers import graph_from_edges, random_graph, random_partition


def _federation(graph, part, settings, schedule, seed=0):
    torch.manual_seed(seed)
    model = build_model(settings.model, graph.num_features, settings.hidden, graph.num_classes,
                        settings.layers, settings.dropout)
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    clients = {d.client_id: MiniBatchClient(d, settings, seed) for d in split_graph(graph, part)}
    rt = LocalRuntime(clients)
    srv = FedSGDServer(rt, settings, weights, schedule, seed=seed, num_nodes=graph.num_nodes)
    srv.setup()
    return srv, rt, model, weights


class _Fixed:
    """A schedule that always sends the same clients cross-client."""

    def __init__(self, cross, fanouts):
        self.cross, self.fanouts = cross, fanouts

    def step(self, t, m, gen):
        return Step(list(self.cross), list(self.fanouts))


def _one_cross_iteration(srv, rt, weights, chosen, monkeypatch=None):
    """Run the cross-client part of one iteration; return begin results, uploads and blocks."""
    captured = {}
    if monkeypatch is not None:
        real = server_mod.build_plan

        def spy(blocks, owner):
            captured["blocks"] = blocks
            return real(blocks, owner)

        monkeypatch.setattr(server_mod, "build_plan", spy)
    step = srv.schedule.step(0, len(rt.client_ids), srv.generator)
    begun = rt.call("minibatch.begin", {k: {"weights": weights, "iteration": 0, "cross": k in chosen}
                              for k in rt.client_ids}, phase="train")
    srv._cross(0, step, begun)
    res = rt.call("minibatch.finish", {k: {"local": k not in chosen} for k in rt.client_ids}, phase="train")
    return begun, res, captured.get("blocks")


@pytest.mark.parametrize("model,tol", [("sage", 1e-6), ("gin", 2e-6), ("gcn", 1e-6)])
def test_full_fanout_cross_client_equals_centralised(model, tol):
    """All clients cross-client with every neighbour: each client's batch outputs, its loss and
    the summed uploaded gradients equal centralised full-graph message passing on the same
    batches with the same weights."""
    g, part = random_graph(120, seed=0), random_partition(120, 4)
    s = MiniBatchSettings(model=model, hidden=16, layers=2, dropout=0.0, batch_size=10,
                          num_neighbors=(-1, -1))
    srv, rt, ref, w = _federation(g, part, s, _Fixed(range(4), [-1, -1]))
    begun, res, _ = _one_cross_iteration(srv, rt, w, set(range(4)))
    fb = full_block(g.edge_index, g.num_nodes)
    lp = block_forward(ref, aggregation_kind(model), g.x, [fb, fb])
    total = 0.0
    for k in range(4):
        batch = begun[k]["batch"]
        party = rt.local_client(k).party
        assert torch.equal(party.last_ids, batch)
        assert torch.allclose(party.last_output, lp[batch].detach(), atol=tol)
        loss = F.nll_loss(lp[batch], g.y[batch])
        assert res[k]["loss"] == pytest.approx(float(loss.detach()), abs=tol)
        total = total + loss
    total.backward()
    for name, p in ref.named_parameters():
        uploaded = sum(res[k]["grad"][name] for k in range(4))
        assert torch.allclose(uploaded, p.grad, atol=tol), name
    assert srv.tally["backward"] > 0 and srv.tally["forward"] > 0


def test_sampled_cross_client_equals_single_process_on_the_same_sample(monkeypatch):
    """With num_neighbors (2, 3) the federated computation equals PyG's layers run in one process on
    the very blocks the server sampled; the chosen clients' losses and the summed gradients
    agree, and the uninvolved clients' local gradients are added as usual."""
    g, part = random_graph(150, seed=1), random_partition(150, 5, seed=1)
    s = MiniBatchSettings(model="sage", hidden=8, layers=2, dropout=0.0, batch_size=6,
                          num_neighbors=(2, 3))
    chosen = [1, 3]
    srv, rt, ref, w = _federation(g, part, s, _Fixed(chosen, [2, 3]))
    begun, res, blocks = _one_cross_iteration(srv, rt, w, set(chosen), monkeypatch)
    lp = block_forward(ref, "mean", g.x[blocks[0].src_ids], blocks)
    seeds_group = blocks[-1].src_group[: blocks[-1].num_dst]
    total = 0.0
    for j, k in enumerate(chosen):
        loss = F.nll_loss(lp[seeds_group == j], g.y[begun[k]["batch"]])
        assert res[k]["loss"] == pytest.approx(float(loss.detach()), abs=1e-6)
        total = total + loss
    # the other clients' local steps: recomputed from fresh clients with the same seed
    others = {d.client_id: MiniBatchClient(d, s, 0) for d in split_graph(g, part)}
    local = [others[k].step(w, 0)["grad"] for k in range(5) if k not in chosen]
    total.backward()
    for name, p in ref.named_parameters():
        uploaded = sum(res[k]["grad"][name] for k in range(5))
        expect = p.grad + sum(gr[name] for gr in local)
        assert torch.allclose(uploaded, expect, atol=1e-6), name


def _cfg(**kw):
    base = dict(clients=4, partition="iid", beta=1.0, min_client_size=1, metis_max_degree=0,
                model="sage", hidden=8,
                layers=2, dropout=0.0, batch_size=8, num_neighbors="2,3", lr=0.01, weight_decay=5e-4,
                device="cpu", rounds=6, eval_every=3, runtime="local", bandwidth="", latency="",
                oracle_eval=True, repeats=1, server_optimizer="adam", eval_mode="cross",
                period=2, cross_clients=2, cross_at_start=True)
    base.update(kw)
    return SimpleNamespace(**base)


def _progress():
    from fedgl.progress import RoundProgress

    return RoundProgress(None)


def test_k0_is_local_only_and_i1_km_is_fedgnn_g():
    from fedgl.algorithms.minibatch_baselines.runner import run_fedgnn_g, run_local_only
    from fedgl.algorithms.swift_fedgnn.runner import run_repeat
    from tests.helpers import assert_same_run

    g = random_graph(120, seed=2)
    kw = dict(repeat=0, seed=0, progress=_progress())
    swift_k0 = run_repeat(g, _cfg(cross_clients=0), **kw)
    local = run_local_only(g, _cfg(), **kw)
    assert_same_run(swift_k0, local, tol=0.0)
    assert swift_k0.extra["communicating_iterations"] == 0
    assert swift_k0.extra["bytes_by_kind"].keys() == {"model_and_gradients"}
    swift_g = run_repeat(g, _cfg(period=1, cross_clients=4), **kw)
    fedgnn_g = run_fedgnn_g(g, _cfg(), **kw)
    assert_same_run(swift_g, fedgnn_g, tol=0.0)
    assert swift_g.extra["communicating_iterations"] == 6
    # federated cross evaluation is the global-graph accuracy (the oracle) exactly
    for row in swift_g.history:
        if "val_acc" in row:
            assert row["val_acc"] == pytest.approx(row["oracle_val_acc"], abs=1e-7)
            assert row["test_acc"] == pytest.approx(row["oracle_test_acc"], abs=1e-7)


def test_local_training_ignores_other_clients_data():
    """K = 0: perturbing every feature of other clients leaves client 0's upload unchanged."""
    g, part = random_graph(100, seed=3), random_partition(100, 3, seed=3)
    s = MiniBatchSettings(model="sage", hidden=8, layers=2, dropout=0.0, batch_size=5,
                          num_neighbors=(3, 3))
    a, _, _, w = _federation(g, part, s, PeriodicSchedule(1, 0, [3, 3]))
    noisy = g.with_features(g.x + 5.0 * (torch.from_numpy(part.owner) != 0).float()[:, None])
    b, _, _, _ = _federation(noisy, part, s, PeriodicSchedule(1, 0, [3, 3]))
    ra = a.runtime.call("minibatch.step", {"weights": w, "iteration": 0}, phase="train")
    rb = b.runtime.call("minibatch.step", {"weights": w, "iteration": 0}, phase="train")
    for name in ra[0]["grad"]:
        assert torch.equal(ra[0]["grad"][name], rb[0]["grad"][name])
        assert not torch.equal(ra[1]["grad"][name], rb[1]["grad"][name])


def test_bytes_on_a_tiny_graph_equal_the_hand_count():
    """Path 0-1-2-3; client 0 owns {0, 1}, client 1 owns {2, 3}; 3 features, hidden 2, 2
    classes, 2-layer SAGE, all neighbours; client 0 trains cross-client on batch [0, 1].

    Sampled instances [0, 1, 2, 3]; layer-1 edges 1->0, 0->1 (local to c0), 3->2 (local to c1),
    2->1 (c1 contributes to target 1), 1->2 (c0 contributes to target 2); layer-2 edges 1->0,
    0->1 (local to c0), 2->1 (c1 contributes to target 1). int64 ids = 8 B, float32 = 4 B.

    control to c0: ids 2x8 + depth 3x8 + layer 1 (local 2x2x8, contrib 2x1x8, slots 8, recv 8)
      + layer 2 (local 32, contrib 0, slots 8, recv 8) + "mean" 4 + train flag 1      = 157
    control to c1: ids 16 + depth 24 + layer 1 (local 16, contrib 16, slots 8, recv 8)
      + layer 2 (local 0, contrib 16, slots 8, recv 0) + 4 + 1                         = 117
    up after begin (layer-1 partial sum 1x3 + count 1, float32): c0 16, c1 16
    forward layer 1, down: layer 8 + received sum 1x3 + count 1 -> c0 24, c1 24
      up: layer-2 partials (hidden 2): c0 has no slot -> 0; c1 1x2 + 1 -> 12
    forward layer 2, down: 8 + c0 receives 1x2 + 1 -> 20; c1 receives nothing -> 8
      up: gradient of c0's received layer-2 sum, 1x2 -> 8; c1 0
    backward layer 1, down: 8 + gradient of the partials each sent for layer 2: c0 0 -> 8,
      c1 1x2 -> 16; up: nothing (layer-1 inputs are raw features) -> 0, 0
    cross-client total: down c0 209, c1 165; up c0 24, c1 28.
    Around it: begin (model 24 floats = 96 B, iteration 8, flag 1) -> 105 down each; up: c0's
    batch 2x8 = 16; finish: flag 1 down; up gradient 96 + loss 8 + count 8 = 112 each.
    """
    g = graph_from_edges([(0, 1), (1, 2), (2, 3)], 4, num_features=3, num_classes=2)
    part = Partition(torch.tensor([0, 0, 1, 1]).numpy(), 2)
    s = MiniBatchSettings(model="sage", hidden=2, layers=2, dropout=0.0, batch_size=0,
                          num_neighbors=(-1, -1))
    srv, rt, _, w = _federation(g, part, s, _Fixed([0], [-1, -1]))
    assert sum(v.numel() for v in w.values()) == 24
    led = rt.ledger
    assert led.bytes("pretrain", "up") == 2 * 8 + 2 * 8 + (2 + 4) * 2 * 8  # ids + incident edges
    srv.iteration(0)
    assert led.per_client("train", "down") == {0: 209 + 105 + 1, 1: 165 + 105 + 1}
    assert led.per_client("train", "up") == {0: 24 + 16 + 112, 1: 28 + 0 + 112}
    assert srv.tally["backward"] == 8 + 16
    assert srv.aggregates == {"aggregates": 3, "single_node_aggregates": 3}


def test_pns_cache_holds_exact_remote_sums_and_the_interval_shrinks():
    from fedgl.algorithms.minibatch.server import ShrinkingSchedule

    sched = ShrinkingSchedule(10, 0.5, 1)
    gen = torch.Generator()
    hits = [t for t in range(22) if sched.step(t, 3, gen).refresh_cache]
    assert hits == [0, 10, 15, 17, 18, 19, 20, 21]
    g, part = random_graph(90, seed=4), random_partition(90, 3, seed=4)
    s = MiniBatchSettings(model="sage", hidden=8, layers=2, batch_size=5, num_neighbors=(3, 3))
    srv, rt, _, _ = _federation(g, part, s, ShrinkingSchedule(5, 1.0))
    srv.pns_fanout = -1
    srv._refresh_cache(0)
    owner = torch.from_numpy(part.owner)
    src, dst = g.edge_index
    remote = owner[src] != owner[dst]
    want = torch.zeros_like(g.x).index_add_(0, dst[remote], g.x[src[remote]])
    cnt = torch.bincount(dst[remote], minlength=90).float()
    for k in range(3):
        c = rt.local_client(k)
        ids = c.data.node_ids
        assert torch.allclose(c.cache["sum"], want[ids], atol=1e-6)
        assert torch.equal(c.cache["count"], cnt[ids])
    assert srv.tally["cache_refresh"] > 0


def test_llcg_and_pns_runs_and_simulated_time():
    from fedgl.algorithms.minibatch_baselines.runner import run_llcg, run_local_only, run_pns

    g = random_graph(120, seed=5)
    kw = dict(repeat=0, seed=0, progress=_progress())
    llcg = run_llcg(g, _cfg(correction_period=3, correction_clients=0, bandwidth="10Mbps",
                            latency="1ms"), **kw)
    assert llcg.extra["communicating_iterations"] == 2  # t = 0 and t = 3 of 6
    pns = run_pns(g, _cfg(pns_interval=4, pns_decay=0.5, pns_min_interval=1, pns_fanout=2), **kw)
    assert pns.extra["communicating_iterations"] == 2  # gaps 4, 2: refreshes at t = 0 and 4
    local = run_local_only(g, _cfg(), **kw)
    assert llcg.final["train_bytes"] > local.final["train_bytes"]
    assert pns.final["train_bytes"] > local.final["train_bytes"]
    sims = [h["sim_seconds"] for h in llcg.history]
    assert all(b > a for a, b in zip(sims, sims[1:], strict=False))
    # each call lasts at least its busiest link's transfer: a lower bound from the totals
    assert sims[-1] >= llcg.final["train_bytes"] * 8 / 10e6 / 4


def test_chunked_cross_evaluation_equals_one_exchange():
    g, part = random_graph(120, seed=6), random_partition(120, 3, seed=6)
    s = MiniBatchSettings(model="gcn", hidden=8, layers=2, batch_size=8, num_neighbors=(3, 3))
    srv, rt, _, _ = _federation(g, part, s, PeriodicSchedule(1, 0, [3, 3]))
    whole = srv.evaluate()
    srv.eval_batch = 7
    before = rt.ledger.messages("eval")
    assert srv.evaluate() == whole
    assert rt.ledger.messages("eval") - before > 2 * 3 * 4  # many exchanges, each counted
