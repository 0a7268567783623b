"""Cross-device federations: clients sampled per round (seeded, exact resume), no model kept by
idle clients, 10,000 clients in one process, power-law client sizes."""

from __future__ import annotations

import numpy as np

from fedgl.algorithms.fedgcn import FedGCNClient, FedGCNServer
from fedgl.algorithms.runner import run_federated
from fedgl.config import Config
from fedgl.data.client_data import client_shard, split_graph
from fedgl.data.partition import powerlaw_partition
from fedgl.data.synthetic import load_synthetic
from fedgl.federation.client_sampling import ClientSampler
from fedgl.progress import RoundProgress
from tests.helpers import interrupted_then_resumed, random_graph, random_partition


def _cfg(**values) -> Config:
    return Config.from_dict({"progress": False, "partition": "iid", **values})


def _run(graph, cfg, **kwargs):
    return run_federated(graph, cfg, repeat=0, seed=cfg.seed, client_cls=FedGCNClient,
                         server_cls=FedGCNServer, progress=RoundProgress(None), **kwargs)


def test_sampler_is_seeded_by_round_and_uniform():
    ids = list(range(50))
    s = ClientSampler(5, seed=3)
    assert s.sample(7, ids) == ClientSampler(5, seed=3).sample(7, ids)
    assert s.sample(7, ids) != s.sample(8, ids)
    assert s.sample(7, ids) != ClientSampler(5, seed=4).sample(7, ids)
    assert len(set(s.sample(2, ids))) == 5 and set(s.sample(2, ids)) <= set(ids)
    assert ClientSampler(0, 1).sample(1, ids) == ids
    counts = np.bincount(np.concatenate([s.sample(t, ids) for t in range(2000)]), minlength=50)
    assert counts.min() > 0.7 * 200 and counts.max() < 1.3 * 200  # each client ~1/10 of rounds


def test_only_sampled_clients_train_and_no_model_is_kept():
    graph = random_graph(nodes=240, seed=1)
    cfg = _cfg(dataset="sbm", clients=12, clients_per_round=3, rounds=4, hops=1,
               min_client_size=1, partition="iid")
    seen = []

    def hook(r, t, server):
        rt = server.runtime
        trained = {k for k in rt.client_ids if rt.ledger.bytes("train", "up", k) > 0}
        seen.append(trained)
        assert all(rt.local_client(k)._model is None for k in rt.client_ids)

    result = _run(graph, cfg, on_round=hook)
    sampler = ClientSampler(3, cfg.seed)
    expected = set()
    for t, trained in enumerate(seen, start=1):
        expected |= set(sampler.sample(t, list(range(12))))
        assert trained == expected
    assert result.final["rounds"] == 4
    # a training message goes to 3 clients per round, not 12
    model_msgs = result.ledger["messages"]["train"]["down"]
    assert model_msgs == 3 * 4


def test_sampled_run_resumes_exactly(tmp_path):
    graph = random_graph(nodes=200, seed=2)
    cfg = _cfg(dataset="sbm", clients=10, clients_per_round=4, rounds=6, hops=2,
               min_client_size=1, partition="iid", checkpoint_every=1, out=str(tmp_path))
    reference = _run(graph, cfg)

    resumed = interrupted_then_resumed(_run, graph, cfg, tmp_path, at=3)
    assert resumed.history == reference.history
    assert resumed.ledger["bytes"] == reference.ledger["bytes"]


def test_split_graph_equals_per_client_shards():
    graph = random_graph(nodes=150, seed=3)
    part = random_partition(graph.num_nodes, 7, seed=3)
    for fast, ref in zip(split_graph(graph, part), (client_shard(graph, part, k)
                                                     for k in range(7)), strict=True):
        for name, value in ref.tensors().items():
            assert value.equal(fast.tensors()[name]), name


def test_powerlaw_client_sizes():
    part = powerlaw_partition(50_000, 1000, seed=0, min_size=3)
    sizes = np.array(part.sizes())
    assert sizes.sum() == 50_000 and sizes.min() >= 3
    assert sizes.max() > 10 * np.median(sizes)  # a heavy tail, unlike iid
    assert powerlaw_partition(50_000, 1000, seed=0, min_size=3).owner.tolist() == part.owner.tolist()


def test_ten_thousand_clients_in_one_process():
    graph = load_synthetic("synthetic:30000,120000,16,5", cache=False)
    cfg = _cfg(dataset="sbm", clients=10_000, clients_per_round=100, rounds=3, hops=0,
               partition="powerlaw", min_client_size=1, eval_every=3)
    result = _run(graph, cfg)
    assert result.partition["num_clients"] == 10_000
    assert result.ledger["messages"]["train"]["down"] == 300
    assert result.ledger["messages"]["eval"]["down"] == 10_000
    assert 0.0 < result.final["test_acc"] <= 1.0
