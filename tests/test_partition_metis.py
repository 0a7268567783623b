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


def test_metis_train_evens_out_training_nodes_and_keeps_sizes(sbm):
    """Training nodes all in one SBM block (METIS puts them on one client): metis-train spreads
    them to 20 per client while keeping METIS's part sizes and most of its cut advantage."""
    import torch

    train = sbm.y == 0
    g = type(sbm)(sbm.name, sbm.x, sbm.y, sbm.edge_index, train, ~train, ~train, sbm.num_classes)
    plain = partition(g, 6, method="metis", seed=0)
    balanced = partition(g, 6, method="metis-train", seed=0)
    t = int(train.sum())
    per_client = np.bincount(balanced.owner[train.numpy()], minlength=6)
    assert per_client.min() >= t // 6 and per_client.max() <= -(-t // 6), per_client
    assert np.bincount(plain.owner[train.numpy()], minlength=6).max() > 2 * (t // 6)
    assert balanced.sizes() == plain.sizes()
    rand = partition(g, 6, method="random", seed=0)
    assert balanced.cross_client_edges(g.edge_index) < rand.cross_client_edges(g.edge_index)
    assert torch.is_tensor(g.train_mask)


def test_random_partition_is_not_the_sbm_class_draw(sbm):
    """Same seed as the SBM generator: the owners must not reproduce its class labels."""
    part = partition(sbm, sbm.num_classes, method="random", seed=0)
    agree = float((part.owner == sbm.y.numpy()).mean())
    assert agree < 0.3, agree  # 1/6 expected by chance


def test_metis_reads_sorted_edges_in_place_and_gives_the_same_parts(sbm):
    """Edges sorted by (destination, source), as fedgl's graphs hold them, are read without a
    sort; any other column order is sorted first; both give METIS the same input."""
    import torch

    from fedgl.data.partition import _sorted_by_destination

    ei = sbm.edge_index
    assert _sorted_by_destination(ei.numpy())
    shuffled = ei[:, torch.randperm(ei.shape[1], generator=torch.Generator().manual_seed(0))]
    assert not _sorted_by_destination(shuffled.numpy())
    a = metis_partition(ei, sbm.num_nodes, 4, seed=3)
    b = metis_partition(shuffled, sbm.num_nodes, 4, seed=3)
    assert np.array_equal(a.owner, b.owner)


def test_degree_capped_metis_keeps_a_symmetric_sample_and_partitions_well(sbm):
    """``max_degree``: the kept edge set is symmetric and every node keeps about k edges; the
    partition is valid, balanced and still cuts far fewer edges than random."""
    import torch

    from fedgl.data.partition import sparsify_degree

    src, dst = sbm.edge_index.numpy()
    keep = sparsify_degree(src, dst, sbm.num_nodes, 2, seed=1)
    kept = set(zip(src[keep].tolist(), dst[keep].tolist(), strict=True))
    assert kept == {(d, s) for s, d in kept}  # symmetric
    deg = np.bincount(dst, minlength=sbm.num_nodes)
    kdeg = np.bincount(dst[keep], minlength=sbm.num_nodes)
    assert kdeg.sum() < 0.75 * deg.sum() and kdeg.max() <= deg.max()
    assert np.mean(kdeg[deg >= 2]) >= 2  # at least k in expectation, per node with k edges
    assert np.array_equal(keep, sparsify_degree(src, dst, sbm.num_nodes, 2, seed=1))
    part = metis_partition(sbm.edge_index, sbm.num_nodes, 6, seed=0, max_degree=4)
    sizes = np.bincount(part.owner, minlength=6)
    assert sizes.sum() == sbm.num_nodes and sizes.max() <= 1.05 * sbm.num_nodes / 6
    rand = random_partition(sbm.num_nodes, 6, seed=0)
    ei = torch.as_tensor(sbm.edge_index)
    assert part.cross_client_edges(ei) < 0.6 * rand.cross_client_edges(ei)


def test_metis_max_degree_config_key_reaches_the_partition():
    """``--metis-max-degree k`` partitions the degree-capped graph (the products-sized runs' METIS)
    and is refused with a partition that does not read it."""
    import pytest

    from fedgl.config import Config
    from fedgl.data.shards import make_partition
    from fedgl.errors import ConfigError

    sbm = stochastic_block_model(nodes=300, classes=4, alpha=0.1, seed=1)
    cfg = Config(clients=5, partition="metis", metis_max_degree=3, min_client_size=1)
    got = make_partition(sbm, cfg, seed=0)
    want = metis_partition(sbm.edge_index, sbm.num_nodes, 5, seed=0, min_size=1, max_degree=3)
    whole = metis_partition(sbm.edge_index, sbm.num_nodes, 5, seed=0, min_size=1)
    assert np.array_equal(got.owner, want.owner)
    assert not np.array_equal(want.owner, whole.owner)  # the key changes the input METIS sees
    with pytest.raises(ConfigError, match="applies to the metis partitions"):
        Config(partition="dirichlet", metis_max_degree=3)
