"""GLASU end to end: a real-data Cora run, the baselines, and the Ray runtime."""

from __future__ import annotations

import pytest

from fedgl.algorithms.glasu.options import GlasuOptions
from fedgl.algorithms.glasu.runner import run_glasu
from fedgl.api import load_graph
from fedgl.config import Config
from fedgl.progress import round_progress
from tests.helpers import assert_same_run


def _run(cfg: Config, options: GlasuOptions, seed: int = 0):
    graph = load_graph(cfg)
    with round_progress(False) as progress:
        return run_glasu(graph, cfg, options, repeat=0, seed=seed, progress=progress)


def test_glasu_learns_cora_and_counts_its_messages(data_root):
    cfg = Config.from_dict(dict(dataset="cora", data_root=str(data_root), clients=3, layers=4,
                                hidden=32, dropout=0.0, lr=0.01, weight_decay=0.0, rounds=40,
                                eval_every=40, progress=False))
    res = _run(cfg, GlasuOptions(backbone="gcnii", agg_layers="2", stale_steps=4,
                                 optimizer="adam"))
    assert res.final["test_acc"] > 0.6  # 160 updates of batch 16 from 140 labels
    assert res.partition["columns"] == [478, 478, 477]
    assert res.partition["edges"] == [round(0.8 * 5278)] * 3
    # 4KM messages per round, nothing else in training
    assert res.ledger["messages"]["train"]["up"] == 40 * 2 * 2 * 3
    assert res.extra["params"]["agg_layers_1based"] == [2, 4]


def test_baselines_run_and_single_parties_send_nothing():
    cfg = Config.from_dict(dict(dataset="sbm", sbm_nodes=150, clients=3, layers=2, hidden=8,
                                rounds=3, eval_every=3, lr=0.1, progress=False))
    for mode, bytes_sent in (("centralized", False), ("standalone", False), ("simulated", True)):
        res = _run(cfg, GlasuOptions(baseline=mode, backbone="gcn"))
        assert (res.final["train_bytes"] > 0) == bytes_sent, mode
        assert 0.0 <= res.final["test_acc"] <= 1.0
    res = _run(cfg, GlasuOptions(baseline="standalone", backbone="gcn"))
    per_client = res.extra["standalone_test_acc"]
    assert len(per_client) == 3
    assert res.final["test_acc"] == pytest.approx(sum(per_client) / 3)
    sim = _run(cfg, GlasuOptions(baseline="simulated", backbone="gcn"))
    assert sim.partition["edges"] == [sim.partition["graph_edges"]] * 3
    assert sim.extra["params"]["grad_mode"] == "exact"


def test_ray_runtime_gives_the_same_run(local_ray):
    base = dict(dataset="sbm", sbm_nodes=300, clients=3, layers=2, hidden=8, rounds=3,
                eval_every=1, lr=0.1, progress=False)
    options = GlasuOptions(backbone="gcn", agg_layers="2", stale_steps=2)
    local = _run(Config.from_dict(base), options)
    ray_res = _run(Config.from_dict({**base, "runtime": "ray"}), options)
    assert ray_res.extra["runtime"] == "ray"
    assert len(ray_res.extra["client_peak_rss_mb"]) == 3  # one actor per vertical client
    assert_same_run(local, ray_res, tol=1e-6)
    assert local.history[-1]["test_acc"] > 0  # a non-trivial split (no empty masks)
