"""Swift-FedGNN and its baselines through the configuration: registration, bad input, and the
METIS / random partitions for other horizontal algorithms."""

from __future__ import annotations

import pytest

import fedgl
from fedgl.errors import ConfigError

SMALL = dict(dataset="sbm", sbm_nodes=150, clients=3, model="sage", hidden=8, batch_size=8,
             num_neighbors="2,3", rounds=2, eval_every=2, progress=False)


@pytest.mark.parametrize("algorithm", ["fedgnn-g", "local-only", "llcg", "fedgnn-pns", "swift"])
def test_every_minibatch_algorithm_runs_through_the_api(algorithm):
    extra = {"cross_clients": 2, "period": 1} if algorithm == "swift" else {}
    res = fedgl.run(algorithm=algorithm, partition="random", **SMALL, **extra)
    rep = res.repeats[0]
    assert len(rep.history) == 2 and 0.0 <= rep.final["val_acc"] <= 1.0
    assert rep.final["train_bytes"] > 0 and "aggregates" in rep.extra


@pytest.mark.parametrize("bad,match", [
    (dict(cross_clients=5), "cross_clients"),
    (dict(period=0), "period"),
    (dict(model="gat"), "model"),
    (dict(num_neighbors="3,2,1"), "num_neighbors"),
    (dict(server_optimizer="rmsprop"), "server_optimizer"),
    (dict(local_steps=5), "local_steps"),
])
def test_bad_swift_config_names_the_fix(bad, match):
    with pytest.raises(ConfigError, match=match):
        fedgl.run(algorithm="swift-fedgnn", **{**SMALL, "cross_clients": 2, **bad})


@pytest.mark.parametrize("method", ["metis", "random"])
def test_fedgcn_runs_on_metis_and_random_partitions(method):
    res = fedgl.run(algorithm="fedgcn", dataset="sbm", sbm_nodes=200, clients=4, rounds=2,
                    partition=method, progress=False)
    part = res.repeats[0].partition
    assert sum(part["nodes"]) == 200 and len(part["nodes"]) == 4


def test_bounded_cross_evaluation_scores_a_fixed_subset():
    """``eval_max_nodes`` caps the labelled nodes scored per split per client (the same subset
    at every evaluation); ``eval_num_neighbors`` samples the evaluation neighbourhood."""
    from fedgl.algorithms.minibatch import server as server_mod

    seen: list = []
    real = server_mod.pooled_accuracy

    def spy(res):
        seen.append({k: r["total"] for k, r in res.items()})
        return real(res)
    mp = pytest.MonkeyPatch()
    mp.setattr(server_mod, "pooled_accuracy", spy)
    try:
        full = fedgl.run(algorithm="local-only", partition="random", **{**SMALL, "rounds": 4})
        fedgl.run(algorithm="local-only", partition="random", eval_max_nodes=3,
                  eval_num_neighbors="2,2", **{**SMALL, "rounds": 4})
    finally:
        mp.undo()
    assert len(seen) == 4
    assert seen[2] == seen[3]  # the same subset every time
    for k, totals in seen[2].items():
        assert all(t <= 3 for t in totals) and sum(totals) > 0
        assert all(t >= min(3, f) for t, f in zip(totals, seen[0][k], strict=True))
    assert full.repeats[0].history[-1]["val_acc"] >= 0.0
    with pytest.raises(ConfigError, match="eval_num_neighbors"):
        fedgl.run(algorithm="local-only", eval_num_neighbors="2,2,2", **SMALL)
