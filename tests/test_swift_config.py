"""Swift-FedGNN and its baselines through the configuration: registration, bad input, and the
METIS / random partitions for other horizontal algorithms."""

from __future__ import annotations

import pytest

import fedgl
from fedgl.errors import ConfigError

SMALL = dict(dataset="sbm", sbm_nodes=150, clients=3, model="sage", hidden=8, batch_size=8,
             fanouts="3,2", rounds=2, eval_every=2, progress=False)


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
    (dict(fanouts="3,2,1"), "fanouts"),
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
