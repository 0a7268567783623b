"""The CSR neighbour sampler: counts, true neighbours, uniformity, blocks, seeding."""

from __future__ import annotations

import math

import pytest
import torch

from fedgl.data.sampling import CSRGraph, sample_blocks, sample_neighbors, uniform_batch
from tests.helpers import random_graph


def _star_plus_graph() -> tuple[torch.Tensor, int]:
    """Node 0 has 12 neighbours (1..12); nodes 13..15 form a path; node 16 is isolated."""
    edges = [(0, j) for j in range(1, 13)] + [(13, 14), (14, 15)]
    ei = torch.tensor(edges).t()
    return torch.cat([ei, ei.flip(0)], dim=1), 17


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_counts_are_min_fanout_degree_and_neighbours_are_true(dtype):
    g = random_graph(200, seed=3)
    csr = CSRGraph.from_edge_index(g.edge_index, g.num_nodes, dtype=dtype)
    assert csr.indices.dtype == dtype and csr.indptr.dtype == dtype
    true = set(map(tuple, g.edge_index.t().tolist()))  # (src, dst)
    nodes = torch.arange(g.num_nodes)
    deg = g.degrees()
    gen = torch.Generator().manual_seed(0)
    for fanout in (0, 1, 3, 7, -1):
        pos, nbr = sample_neighbors(csr, nodes, fanout, gen)
        counts = torch.bincount(pos, minlength=g.num_nodes)
        want = deg if fanout < 0 else deg.clamp(max=fanout)
        assert torch.equal(counts, want)
        assert all((int(u), int(v)) in true for u, v in zip(nbr, pos, strict=True))
        pairs = pos * g.num_nodes + nbr
        assert torch.unique(pairs).numel() == pairs.numel()  # without replacement


def test_uniform_choice_chi_square():
    """Node 0 has 12 neighbours and draws 3: every neighbour's inclusion count over 6000 draws
    must be consistent with probability 3/12 (chi-square, 11 dof). The statistic's 99.9% quantile
    is 31.3; a sampler biased by even 10% towards some neighbours gives several hundred."""
    ei, n = _star_plus_graph()
    csr = CSRGraph.from_edge_index(ei, n)
    gen = torch.Generator().manual_seed(1234)
    draws, fanout = 6000, 3
    seeds = torch.zeros(draws, dtype=torch.long)  # one independent draw per repetition
    pos, nbr = sample_neighbors(csr, seeds, fanout, gen)
    assert torch.equal(torch.bincount(pos, minlength=draws), torch.full((draws,), fanout))
    counts = torch.bincount(nbr, minlength=13)[1:13].double()
    expected = draws * fanout / 12
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 31.3, chi2
    # and the pairs are uniform too (no pair structure): 66 pairs of a 2-of-12 draw
    pos2, nbr2 = sample_neighbors(csr, torch.zeros(20000, dtype=torch.long), 2, gen)
    a, b = nbr2.view(-1, 2).sort(dim=1).values.t()
    pair_counts = torch.bincount((a - 1) * 12 + (b - 1), minlength=144).double()
    pair_counts = pair_counts[pair_counts > 0]
    assert pair_counts.numel() == 66
    exp2 = 20000 / 66
    chi2_pairs = float(((pair_counts - exp2) ** 2 / exp2).sum())
    assert chi2_pairs < 112.3, chi2_pairs  # 99.9% quantile of chi-square with 65 dof


def test_blocks_shape_prefix_and_fanout_order():
    g = random_graph(300, seed=5)
    csr = CSRGraph.from_edge_index(g.edge_index, g.num_nodes)
    seeds = torch.tensor([0, 5, 17, 42])
    blocks = sample_blocks(csr, seeds, [2, 4], torch.Generator().manual_seed(0))
    assert len(blocks) == 2
    top, bottom = blocks[1], blocks[0]
    assert torch.equal(top.dst_ids, seeds)
    assert torch.equal(bottom.dst_ids, top.src_ids)  # layer 1's outputs are layer 2's inputs
    deg = g.degrees()
    # PyG order (first layer first): the seeds draw num_neighbors[0] = 2 one-hop neighbours,
    # each of those draws num_neighbors[1] = 4
    assert torch.equal(torch.bincount(top.edge_index[1], minlength=4), deg[seeds].clamp(max=2))
    assert torch.equal(torch.bincount(bottom.edge_index[1], minlength=bottom.num_dst),
                       deg[bottom.dst_ids].clamp(max=4))
    for b in blocks:
        assert torch.unique(b.src_ids).numel() == b.num_src  # deduplicated
        src, dst = b.src_ids[b.edge_index[0]], b.dst_ids[b.edge_index[1]]
        true = set(map(tuple, g.edge_index.t().tolist()))
        assert all((int(u), int(v)) in true for u, v in zip(src, dst, strict=True))


def test_groups_keep_instances_apart_and_seeding_is_deterministic():
    g = random_graph(150, seed=2)
    csr = CSRGraph.from_edge_index(g.edge_index, g.num_nodes)
    seeds, groups = torch.tensor([3, 3, 9]), torch.tensor([0, 1, 1])
    a = sample_blocks(csr, seeds, [3, 3], torch.Generator().manual_seed(7), groups=groups)
    b = sample_blocks(csr, seeds, [3, 3], torch.Generator().manual_seed(7), groups=groups)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x.src_ids, y.src_ids) and torch.equal(x.edge_index, y.edge_index)
    keys = a[0].src_group * g.num_nodes + a[0].src_ids
    assert torch.unique(keys).numel() == keys.numel()
    # an edge never joins instances of different groups
    for blk in a:
        assert torch.equal(blk.src_group[blk.edge_index[0]], blk.src_group[blk.edge_index[1]])


def test_uniform_batch():
    pool = torch.arange(10, 60)
    gen = torch.Generator().manual_seed(0)
    b = uniform_batch(pool, 16, gen)
    assert b.numel() == 16 and torch.unique(b).numel() == 16 and torch.isin(b, pool).all()
    assert torch.equal(uniform_batch(pool, 0), pool) and torch.equal(uniform_batch(pool, 99), pool)
    assert math.isclose(float(torch.cat([uniform_batch(pool, 10, gen) for _ in range(2000)])
                              .double().mean()), 34.5, abs_tol=0.3)
