"""Louvain and McMahan p-split partitions: valid, seeded, and shaped as documented."""

from __future__ import annotations

import numpy as np
import pytest

from fedgl.data.partition import louvain_partition, p_split_partition, partition
from fedgl.data.sbm import stochastic_block_model
from fedgl.errors import DataError


@pytest.fixture(scope="module")
def sbm():
    return stochastic_block_model(nodes=400, classes=4, alpha=0.05, mu=0.1, features=4, seed=0)


def _valid(part, n, k):
    assert part.owner.shape == (n,) and part.owner.min() >= 0 and part.owner.max() < k
    assert min(part.sizes()) >= 1


def test_louvain_is_valid_seeded_and_cuts_few_edges(sbm):
    a = louvain_partition(sbm.edge_index, sbm.num_nodes, 4, seed=1)
    b = louvain_partition(sbm.edge_index, sbm.num_nodes, 4, seed=1)
    _valid(a, sbm.num_nodes, 4)
    assert np.array_equal(a.owner, b.owner)
    rand = partition(sbm, 4, method="iid", seed=1)
    assert a.cross_client_edges(sbm.edge_index) < 0.5 * rand.cross_client_edges(sbm.edge_index)
    # more clients than communities: communities are halved until every client has nodes
    many = louvain_partition(sbm.edge_index, sbm.num_nodes, 40, seed=0)
    _valid(many, sbm.num_nodes, 40)


def test_p_split_shares_follow_p(sbm):
    y = np.asarray(sbm.y)
    one_class = p_split_partition(y, 4, 0.0, seed=0)
    _valid(one_class, len(y), 4)
    counts = np.array(one_class.label_counts(y, 4))
    assert (np.count_nonzero(counts, axis=1) == 1).all()  # p = 0: one class per client
    iid = np.array(p_split_partition(y, 4, 1.0, seed=0).label_counts(y, 4))
    assert (iid.max(0) - iid.min(0) <= 1).all()  # p = 1: every class split evenly
    half = np.array(p_split_partition(y, 4, 0.5, seed=0).label_counts(y, 4))
    dominant = half[np.arange(4), np.arange(4)] / half.sum(1)
    assert np.allclose(dominant, 1 - 0.5 + 0.5 / 4, atol=0.06)
    a, b = p_split_partition(y, 4, 0.5, seed=3), p_split_partition(y, 4, 0.5, seed=3)
    assert np.array_equal(a.owner, b.owner)
    assert not np.array_equal(a.owner, p_split_partition(y, 4, 0.5, seed=4).owner)
    with pytest.raises(DataError, match="p must be in"):
        p_split_partition(y, 4, 1.5)


def test_every_horizontal_algorithm_accepts_the_new_partitions(sbm):
    import fedgl

    for method, algo, knob in (("louvain", "fedgcn", {}), ("p-split", "bns-gcn",
                                                          {"mcmahan_p": 0.3})):
        r = fedgl.run(algorithm=algo, dataset="sbm", clients=3, partition=method, rounds=2,
                      **knob, min_client_size=1, progress=False,
                      sbm_nodes=300, sbm_alpha=0.05, oracle_eval=False)
        assert r.repeats[0].partition["num_clients"] == 3
