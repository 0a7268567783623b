"""BNS-GCN and Distributed GCN: the per-round boundary exchange (fedgl.algorithms.boundary)."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch

from fedgl.algorithms.boundary.client import BoundaryClient
from fedgl.algorithms.boundary.server import BoundaryServer
from fedgl.algorithms.distributed_gcn.client import DistributedGCNClient
from fedgl.algorithms.runner import build_federation, initial_weights, run_federated
from fedgl.config import Config
from fedgl.data.partition import Partition
from fedgl.evaluation import OracleEvaluator
from fedgl.federation.messages import payload_nbytes
from fedgl.progress import RoundProgress
from tests.helpers import assert_same_run, graph_from_edges, random_graph, random_partition


def _cfg(clients: int, **kw) -> Config:
    base = {"clients": clients, "progress": False, "rounds": 2, "local_steps": 2,
            "oracle_eval": False, "hidden": 4}
    return Config.from_dict({**base, **kw})


def test_bytes_per_round_equal_a_hand_count():
    # 0-1-2-3-4-5 path plus 0-5; client 0 owns {0, 1, 2}, client 1 owns {3, 4, 5}.
    # Boundary: B_0 = {3, 5} (neighbours of 2 and 0), B_1 = {0, 2}; served S_0 = {0, 2}, S_1 = {3, 5}.
    g = graph_from_edges([(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (0, 5)], 6, num_features=3)
    part = Partition(np.array([0, 0, 0, 1, 1, 1]), 2)
    cfg = _cfg(2, rounds=1, local_steps=2, hidden=4, eval_every=5)
    server = build_federation(g, part, cfg, 0, DistributedGCNClient, BoundaryServer)
    server.pretrain()
    assert server.runtime.ledger.bytes("pretrain", "up") == 6 * 8  # the directory: own ids
    server.runtime.ledger = type(server.runtime.ledger)()
    server.exchange(server.weights, 1, train=True, phase="train")
    server.runtime.call("boundary.finish", phase="train")
    led = server.runtime.ledger
    d, h, steps, layers = 3, 4, 2, 2
    model = payload_nbytes(server.weights)
    b = s = 2  # |B_k| = |S_k| = 2 for both clients
    down = (8 + 1) + 8 * s + (model + (4 * d + 8) * b + 8 + 1) + steps * (layers - 1) * 4 * h * b
    up = 8 * b + (4 * d + 8) * s + steps * (layers - 1) * 4 * h * s + (model + 8 + 8)
    for k in (0, 1):
        assert led.bytes("train", "down", k) == down
        assert led.bytes("train", "up", k) == up
    # messages: sample, serve, begin, 2 steps x 2 layers, finish = 8 each way per client
    assert led.messages("train", "down") == 2 * 8


def test_distributed_forward_equals_centralised_gcn():
    g = random_graph(90, seed=1)
    part = random_partition(g.num_nodes, 3, seed=2)
    cfg = _cfg(3, hidden=8, layers=3)
    server = build_federation(g, part, cfg, 0, DistributedGCNClient, BoundaryServer)
    server.pretrain()
    server.evaluate()
    central = OracleEvaluator(g, cfg).logits(server.weights).log_softmax(-1)
    for k in range(3):
        c = server.runtime.local_client(k)
        assert torch.allclose(c.last_log_probs, central[c.data.node_ids], atol=1e-5)
        assert not c.data.owns(c.boundary).any() and len(c.boundary) > 0


def _run(g, cfg, client_cls):
    return run_federated(g, cfg, repeat=0, seed=0, client_cls=client_cls,
                         server_cls=BoundaryServer, progress=RoundProgress(None))


def test_bns_with_rate_one_equals_distributed_gcn():
    g = random_graph(90, seed=3)
    cfg = _cfg(3, rounds=3, partition="iid", min_client_size=1)
    a = _run(g, cfg, partial(BoundaryClient, rate=1.0))
    b = _run(g, cfg, DistributedGCNClient)
    assert_same_run(a, b, tol=0.0)
    assert a.history[-1]["train_loss"] != a.history[0]["train_loss"]


def test_bns_sampling_sends_fewer_bytes_and_is_seeded():
    g = random_graph(120, seed=4)
    cfg = _cfg(3, rounds=3, partition="iid", min_client_size=1)
    full = _run(g, cfg, DistributedGCNClient)
    half = _run(g, cfg, partial(BoundaryClient, rate=0.3))
    again = _run(g, cfg, partial(BoundaryClient, rate=0.3))
    assert_same_run(half, again, tol=0.0)
    assert half.final["train_bytes"] < full.final["train_bytes"]
    # evaluation always exchanges every boundary node
    assert half.ledger["bytes"]["eval"] == full.ledger["bytes"]["eval"]


def test_received_rows_are_only_sampled_boundary_nodes():
    g = random_graph(120, seed=5)
    part = random_partition(g.num_nodes, 3, seed=0)
    cfg = _cfg(3)
    server = build_federation(g, part, cfg, 0, partial(BoundaryClient, rate=0.5), BoundaryServer)
    server.pretrain()
    server.exchange(initial_weights(g, cfg, 0), 1, train=True, phase="train")
    for k in range(3):
        c = server.runtime.local_client(k)
        assert len(c._sampled) < len(c.boundary)
        assert torch.equal(c._x_remote, g.x[c._sampled])  # exactly the requested rows


def _cora_runs(data_root, clients: int, rounds: int):
    from fedgl.data.datasets import load_dataset

    g = load_dataset("cora", str(data_root))
    common = {"clients": clients, "beta": 10000, "rounds": rounds, "eval_every": rounds,
              "progress": False}
    # the algorithm named, so the run records what that algorithm's runs record (FedGCN's
    # leakage report, the config's default algorithm, costs seconds on Cora and is not theirs)
    dist = _run(g, Config.from_dict({**common, "algorithm": "distributed-gcn"}),
                DistributedGCNClient)
    bns = _run(g, Config.from_dict({**common, "algorithm": "bns-gcn", "boundary_rate": 0.1}),
               partial(BoundaryClient, rate=0.1))
    # the full exchange makes the federated evaluation the centralised forward pass
    assert abs(dist.final["test_acc"] - dist.final["oracle_test_acc"]) < 1e-6
    assert bns.final["train_bytes"] < 0.3 * dist.final["train_bytes"]
    return dist.final["test_acc"], bns.final["test_acc"]


def test_cora_runs_of_both_baselines(data_root):
    """Real data, short (10 rounds, 5 clients): both learn well above chance (7 classes)."""
    dist, bns = _cora_runs(data_root, clients=5, rounds=10)
    assert dist > 0.6 and bns > 0.55


@pytest.mark.slow
def test_cora_runs_of_both_baselines_ten_clients(data_root):
    dist, bns = _cora_runs(data_root, clients=10, rounds=25)
    assert dist > 0.72 and bns > 0.65
