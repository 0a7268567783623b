"""Partitioners: sizes, minimum size, label skew vs β, determinism."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedgl.data.client_data import split_graph
from fedgl.data.partition import dirichlet_partition, iid_partition, partition
from fedgl.data.sbm import stochastic_block_model
from fedgl.errors import DataError


@pytest.fixture(scope="module")
def labels():
    return np.random.default_rng(0).integers(0, 7, size=3000)


def _label_shares(part, labels, classes=7):
    counts = np.asarray(part.label_counts(labels, classes), dtype=float)
    return counts / counts.sum(1, keepdims=True)


def test_sizes_sum_to_n_and_minimum_size_is_honoured(labels):
    for beta in (0.1, 1.0, 100.0):
        part = dirichlet_partition(labels, 10, beta, seed=3, min_size=40)
        sizes = part.sizes()
        assert sum(sizes) == len(labels)
        assert min(sizes) >= 40
        assert part.owner.min() == 0 and part.owner.max() == 9


def test_large_beta_gives_near_uniform_label_shares(labels):
    part = dirichlet_partition(labels, 10, 10000.0, seed=0)
    overall = np.bincount(labels, minlength=7) / len(labels)
    assert np.abs(_label_shares(part, labels) - overall).max() < 0.05


def test_small_beta_gives_skewed_label_shares(labels):
    skewed = _label_shares(dirichlet_partition(labels, 10, 0.1, seed=0), labels).max(1).mean()
    uniform = _label_shares(dirichlet_partition(labels, 10, 10000.0, seed=0), labels).max(1).mean()
    assert skewed > uniform + 0.2


def test_balancing_caps_clients_near_n_over_k(labels):
    part = dirichlet_partition(labels, 10, 1.0, seed=0)
    # a client stops receiving once it holds >= N/K nodes, so it overshoots by < one class
    assert max(part.sizes()) < len(labels) / 10 + np.bincount(labels).max()


def test_same_seed_same_split_and_other_seed_differs(labels):
    a = dirichlet_partition(labels, 10, 1.0, seed=5)
    b = dirichlet_partition(labels, 10, 1.0, seed=5)
    c = dirichlet_partition(labels, 10, 1.0, seed=6)
    assert np.array_equal(a.owner, b.owner)
    assert not np.array_equal(a.owner, c.owner)


def test_iid_partition_is_balanced_and_deterministic():
    a = iid_partition(103, 10, seed=1)
    assert sorted(a.sizes()) == [10] * 7 + [11] * 3
    assert np.array_equal(a.owner, iid_partition(103, 10, seed=1).owner)


def test_infeasible_split_is_a_clear_error(labels):
    with pytest.raises(DataError, match="clients"):
        dirichlet_partition(labels[:50], 10, 1.0, min_size=10)
    with pytest.raises(DataError, match="exceeds"):
        iid_partition(5, 6)


def test_stats_and_split_graph_are_consistent():
    graph = stochastic_block_model(nodes=400, classes=4, alpha=0.05, seed=2)
    part = partition(graph, 5, beta=1.0, seed=2)
    stats = part.stats(graph)
    assert sum(stats["nodes"]) == 400
    assert sum(map(sum, stats["labels"])) == 400
    assert sum(stats["train_nodes"]) == int(graph.train_mask.sum())
    datas = split_graph(graph, part)
    owner = torch.from_numpy(part.owner)
    cut = int((owner[graph.edge_index[0]] != owner[graph.edge_index[1]]).sum()) // 2
    assert stats["cross_client_edges"] == cut
    # every directed edge ends at exactly one client's own node
    assert sum(d.edge_index.size(1) for d in datas) == graph.edge_index.size(1)
