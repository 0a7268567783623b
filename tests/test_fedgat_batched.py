"""Batched local training (fedgl/algorithms/fedgat/batched.py) reproduces every client's own
``fit``: same weights, same losses, same messages counted."""

from __future__ import annotations

from functools import partial

import pytest
import torch

import fedgl
from fedgl.algorithms.fedgat import (
    FedGATClient,
    FedGATServer,
    GATFedAvgServer,
    gat_initial_weights,
)
from fedgl.algorithms.fedgat.dist_gat import DistGATClient
from fedgl.algorithms.runner import build_federation
from fedgl.api import as_config, load_graph
from fedgl.data.shards import make_partition
from tests.helpers import assert_fit_many_matches_fit, assert_same_run

SBM = dict(dataset="sbm", sbm_nodes=240, sbm_classes=3, sbm_features=16, clients=4,
           beta=1.0, progress=False)


def _federation(client_cls, **over):
    cfg = as_config(**{**SBM, "algorithm": "fedgat" if client_cls is FedGATClient
                       else "distgat", **over})
    graph = load_graph(cfg)
    init = gat_initial_weights(cfg, graph.num_features, graph.num_classes, 0)
    server_cls = FedGATServer if client_cls is FedGATClient else GATFedAvgServer
    server = build_federation(graph, make_partition(graph, cfg, 0), cfg, 0, client_cls,
                              partial(server_cls, gat_weights=init, seed=0))
    server.pretrain()
    clients = [server.runtime.local_client(k) for k in server.runtime.client_ids]
    return server, clients


@pytest.mark.parametrize("client_cls", [FedGATClient, DistGATClient])
@pytest.mark.parametrize("over", [dict(dropout=0.0), dict(dropout=0.5, layers=3),
                                  dict(dropout=0.0, fedgat_max_degree=3, fedgat_cap=False)],
                         ids=["plain", "dropout-3-layers", "degree-cap-no-rescale"])
def test_fit_many_equals_each_clients_own_fit(client_cls, over):
    if client_cls is DistGATClient:  # the exact GAT has no polynomial to keep in range
        over = {k: v for k, v in over.items() if k != "fedgat_cap"}
    server, clients = _federation(client_cls, **over)
    w = server.weights
    assert_fit_many_matches_fit(client_cls, clients, w, 3, round=2)


def test_fit_many_declines_where_it_would_not_reproduce_fit():
    _, clients = _federation(FedGATClient, fedgat_backend="protocol")
    assert FedGATClient.fit_many(clients, {}, 1) is None
    _, clients = _federation(FedGATClient, gat_optimizer="adam", lr=0.01)
    assert FedGATClient.fit_many(clients, {}, 1) is None


@pytest.mark.parametrize("algorithm", ["fedgat", "distgat"])
def test_runs_with_and_without_batching_agree(algorithm):
    base = dict(SBM, algorithm=algorithm, rounds=8, eval_every=2, dropout=0.3, clients=6,
                sbm_nodes=150)
    assert_same_run(fedgl.run(**base, batch_clients=True).repeats[0],
                    fedgl.run(**base, batch_clients=False).repeats[0])


def test_clients_without_training_nodes_return_the_global_model():
    server, clients = _federation(FedGATClient, sbm_nodes=100, clients=10, min_client_size=2,
                                  beta=0.5)
    idle = [i for i, c in enumerate(clients) if not c._masks["train"].any()]
    assert idle  # this partition has one (checked when written: client 9)
    w = server.weights
    batched = FedGATClient.fit_many(clients, w, 2, round=1)
    for i, (client, got) in enumerate(zip(clients, batched, strict=True)):
        own = client.fit(w, 2, round=1)
        assert got["num_train"] == own["num_train"]
        for name, value in own["weights"].items():
            assert torch.allclose(got["weights"][name], value, atol=1e-6), (i, name)
        if i in idle:
            assert torch.equal(got["weights"]["convs.0.lin.weight"], w["convs.0.lin.weight"])


@pytest.mark.parametrize("client_cls", [FedGATClient, DistGATClient])
def test_evaluate_many_equals_each_clients_own_evaluate(client_cls):
    server, clients = _federation(client_cls)
    trained = client_cls.fit_many(clients, server.weights, 5, round=1)[0]["weights"]
    many = client_cls.evaluate_many(clients, trained)
    assert many == [c.evaluate(trained) for c in clients]
    _, protocol = _federation(FedGATClient, fedgat_backend="protocol")
    assert FedGATClient.evaluate_many(protocol, server.weights) is None
