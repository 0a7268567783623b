"""GLASU end to end through the API: a real-data Cora run, the baselines, the Ray runtime, and
one-line errors for bad vertical settings."""

from __future__ import annotations

import pytest

import fedgl
from fedgl.errors import ConfigError
from tests.helpers import assert_same_run


def _one(**cfg):
    return fedgl.run(progress=False, **cfg).repeats[0]


def test_glasu_learns_cora_and_counts_its_messages(data_root):
    res = _one(algorithm="glasu", dataset="cora", data_root=str(data_root), clients=3, layers=4,
               hidden=32, dropout=0.0, lr=0.01, weight_decay=0.0, rounds=40, eval_every=40,
               batch_size=16, num_neighbors="3", backbone="gcnii", agg_layers="2", stale_steps=4,
               glasu_optimizer="adam")
    assert res.final["test_acc"] > 0.6  # 160 updates of batch 16 from 140 labels
    assert res.partition["columns"] == [478, 478, 477]
    assert res.partition["edges"] == [round(0.8 * 5278)] * 3
    # 4KM messages per round, nothing else in training
    assert res.ledger["messages"]["train"]["up"] == 40 * 2 * 2 * 3
    assert res.extra["params"]["agg_layers_1based"] == [2, 4]
    assert res.extra["params"]["fanout"] == 3 and res.extra["params"]["batch_size"] == 16


SMALL = dict(dataset="sbm", sbm_nodes=150, clients=3, layers=2, hidden=8, rounds=3, eval_every=3,
             lr=0.1, backbone="gcn", batch_size=16, num_neighbors="3")


def test_baselines_run_and_single_parties_send_nothing():
    for name, sends in (("glasu-centralized", False), ("glasu-standalone", False),
                        ("glasu-simulated", True)):
        res = _one(algorithm=name, **SMALL)
        assert (res.final["train_bytes"] > 0) == sends, name
        assert 0.0 <= res.final["test_acc"] <= 1.0
    res = _one(algorithm="glasu-standalone", **SMALL)
    per_client = res.extra["standalone_test_acc"]
    assert len(per_client) == 3
    assert res.final["test_acc"] == pytest.approx(sum(per_client) / 3)
    sim = _one(algorithm="glasu-simulated", **SMALL)
    assert sim.partition["edges"] == [sim.partition["graph_edges"]] * 3
    assert sim.extra["params"]["grad_mode"] == "exact"
    assert sim.extra["params"]["agg_layers_1based"] == [1, 2]


@pytest.mark.parametrize("cfg, words", [
    (dict(algorithm="glasu", clients=9, sbm_features=8), "9 clients but only 8 feature columns"),
    (dict(algorithm="glasu", partition="iid"), "partition"),
    (dict(algorithm="fedgcn", edge_share=0.5), "edge_share"),
    (dict(algorithm="glasu", agg_layers="3"), "divide layers"),
    (dict(algorithm="glasu", agg_layers="1,3"), "ending with"),
    (dict(algorithm="glasu", grad_mode="exact"), "stale-steps 1"),
    (dict(algorithm="glasu", backbone="gcnii", aggregate="concat"), "aggregate mean"),
    (dict(algorithm="glasu", num_neighbors="3,2"), "same number of neighbours"),
    (dict(algorithm="glasu", setting="horizontal"), "vertical"),
    (dict(algorithm="fedgcn", setting="vertical"), "horizontal"),
])
def test_bad_vertical_runs_get_one_line_errors(cfg, words):
    base = {k: v for k, v in SMALL.items() if k not in cfg}
    if cfg["algorithm"] != "glasu":
        base = dict(dataset="sbm", sbm_nodes=150, rounds=1)
    with pytest.raises(ConfigError, match=words) as info:
        fedgl.run(progress=False, **{**base, **cfg})
    assert "\n" not in str(info.value)


def test_ray_runtime_gives_the_same_run(local_ray):
    base = {**SMALL, "sbm_nodes": 300, "eval_every": 1, "agg_layers": "2", "stale_steps": 2,
            "algorithm": "glasu"}
    local = _one(**base)
    ray_res = _one(runtime="ray", **base)
    assert ray_res.extra["runtime"] == "ray"
    assert len(ray_res.extra["client_peak_rss_mb"]) == 3  # one actor per vertical client
    assert_same_run(local, ray_res, tol=1e-6)
    assert local.history[-1]["test_acc"] > 0  # a non-trivial split (no empty masks)


def test_cli_summary_shows_the_vertical_split(tmp_path, capsys):
    from fedgl.cli import main

    assert main(["run", "--algorithm", "glasu", "--dataset", "sbm", "--sbm-nodes", "120",
                 "--clients", "3", "--layers", "2", "--rounds", "1", "--no-progress",
                 "--out", str(tmp_path / "run")]) == 0
    title = " ".join(capsys.readouterr().out.split())
    assert "3 vertical clients (random feature split" in title and "80% of the edges" in title
    assert "β=" not in title
