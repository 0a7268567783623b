"""METIS and random partitions: coverage, balance, fewer cut edges than random, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from fedgl.data.partition import metis_partition, partition, random_partition
from fedgl.data.sbm import stochastic_block_model
from fedgl.errors import DataError


@pytest.fixture(scope="module")
def sbm():
    return stochastic_block_model(nodes=600, classes=6, alpha=0.05, mu=0.05, features=4, seed=0)


def test_metis_covers_every_node_once_balanced_and_cuts_fewer_edges(sbm):
    k = 6
    part = partition(sbm, k, method="metis", seed=1)
    assert part.owner.shape == (sbm.num_nodes,) and set(np.unique(part.owner)) == set(range(k))
    sizes = np.array(part.sizes())
    assert sizes.sum() == sbm.num_nodes
    assert sizes.max() <= 1.05 * sbm.num_nodes / k  # METIS ufactor 30 (3%) plus rounding slack
    rand = partition(sbm, k, method="random", seed=1)
    metis_cut = part.cross_client_edges(sbm.edge_index)
    rand_cut = rand.cross_client_edges(sbm.edge_index)
    assert metis_cut < 0.6 * rand_cut, (metis_cut, rand_cut)
    again = partition(sbm, k, method="metis", seed=1)
    assert np.array_equal(part.owner, again.owner)


def test_random_partition_is_uniform_and_seeded():
    a = random_partition(10000, 4, seed=3)
    sizes = np.array(a.sizes())
    assert sizes.sum() == 10000 and np.all(np.abs(sizes - 2500) < 200)
    assert np.array_equal(a.owner, random_partition(10000, 4, seed=3).owner)
    assert not np.array_equal(a.owner, random_partition(10000, 4, seed=4).owner)


def test_bad_inputs_name_the_fix(sbm):
    with pytest.raises(DataError, match="clients"):
        metis_partition(sbm.edge_index, sbm.num_nodes, 0)
    with pytest.raises(DataError, match="metis"):
        partition(sbm, 3, method="louvre")
