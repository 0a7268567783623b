"""The fast leakage report equals the reference report: the value-level decoder (sparse passes
to the fixed point) equals the row-by-row reference cell for cell, and the row-space test
(free columns stripped, pivoted Cholesky) equals the eigenvectors of the unstripped blocks:
random systems with tied and generic scales, seeds, two and three levels, the enumeration
bound, random 0/1 blocks, and the real Cora/CiteSeer report with the defaults."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import fedgl.privacy.row_space as row_space
import fedgl.privacy.value_decoding as vd
from fedgl.api import load_graph
from fedgl.config import Config
from fedgl.data.graph import GraphData, clean_edge_index
from fedgl.data.partition import Partition
from fedgl.data.shards import make_partition
from fedgl.privacy.leakage import leakage_report
from fedgl.privacy.sparse_decoding import decode_sparse


def _system(seed, rows=20, nodes=80, levels=(0.0, 1.0), density=0.3, max_members=9,
            max_degree=6, columns=30, seeded=0.2):
    """Rows of random contributors with scales ``d^-1/2`` for small integer degrees (so equal
    scales, hence undecidable cells, are common), features from ``levels``."""
    rng = np.random.default_rng(seed)
    members = [np.sort(rng.choice(nodes, size=rng.integers(1, max_members + 1), replace=False))
               for _ in range(rows)]
    indptr = np.concatenate([[0], np.cumsum([len(m) for m in members])])
    members = np.concatenate(members)
    used = np.unique(members)
    remap = np.full(nodes, -1)
    remap[used] = np.arange(len(used))
    members = remap[members]
    n = len(used)
    coef = rng.integers(1, max_degree + 1, size=n).astype(np.float64) ** -0.5
    levels = np.asarray(levels)
    idx = np.where(rng.random((n, columns)) < density,
                   rng.integers(1, len(levels), size=(n, columns)), 0).astype(np.int8)
    x = levels[idx]
    a = np.zeros((rows, n))
    for i in range(rows):
        a[i, members[indptr[i]:indptr[i + 1]]] = coef[members[indptr[i]:indptr[i + 1]]]
    values = a @ x
    seed_mask = rng.random(n) < seeded
    return indptr, members, coef, values, levels, seed_mask, idx[seed_mask]


def _same(fast, ref):
    assert fast is not None
    assert np.array_equal(fast.known, ref.known)
    assert np.array_equal(np.where(fast.known, fast.levels, 0), np.where(ref.known, ref.levels, 0))
    assert np.array_equal(fast.nodes, ref.nodes)
    assert np.array_equal(fast.unresolved, ref.unresolved)


@pytest.mark.parametrize("seed", range(12))
def test_random_systems_decode_to_the_reference(seed):
    kw = [{}, {"levels": (0.0, 0.5, 1.0)}, {"density": 0.6, "max_members": 14},
          {"seeded": 0.0, "max_degree": 3}][seed % 4]
    system = _system(seed, **kw)
    ref = vd.decode_reference(*system)
    _same(decode_sparse(*system), ref)
    _same(vd.decode(*system), ref)
    assert ref.known.any() and not ref.known.all()   # the case decides some cells, not all


@pytest.mark.parametrize("bound", [4, 8, 16])
def test_the_enumeration_bound_flags_the_same_nodes(monkeypatch, bound):
    monkeypatch.setattr(vd, "MAX_COMBINATIONS", bound)
    system = _system(100 + bound, density=0.5, max_members=12)
    ref = vd.decode_reference(*system)
    assert ref.unresolved.any()
    _same(decode_sparse(*system), ref)


def test_inapplicable_alphabets_fall_back_to_the_reference():
    system = list(_system(7, levels=(0.5, 1.0)))
    assert decode_sparse(*system) is None           # lowest level not 0: the reference runs
    _same(vd.decode(*system), vd.decode_reference(*system))


def _report_with(decoder, monkeypatch, graph, part, cfg):
    """The report with every system decoded alone by ``decoder`` (no stacking)."""
    monkeypatch.setattr(vd, "decode", decoder)
    monkeypatch.setattr(vd, "decode_all", lambda systems: [decoder(*s) for s in systems])
    return leakage_report(graph, part, cfg)


def _reference_report(monkeypatch, graph, part, cfg):
    """The report by the references: row-by-row decoding, every connected block (nothing
    stripped) by the eigenvectors of its Gram matrix, each system alone (nothing batched)."""
    import fedgl.privacy.leakage as leakage

    with monkeypatch.context() as m:
        m.setattr(leakage, "_solve_all", lambda systems: [leakage._solve(*s) for s in systems])
        m.setattr(row_space, "found_in_row_space", row_space.found_by_eigh)
        m.setattr(row_space, "strip_free_columns",
                  lambda a, rows, cols: (np.flatnonzero(rows), np.flatnonzero(cols)))
        return _report_with(vd.decode_reference, m, graph, part, cfg)


def _block(seed, rows, cols, per_row, rank=None):
    """A random 0/1 block; with ``rank``, its rows are sums of ``rank`` random 0/1 rows (so
    rank-deficient, with integer entries as in the released sums' Gram matrices)."""
    rng = np.random.default_rng(seed)
    a = np.zeros((rows, cols))
    for i in range(rows):
        a[i, rng.choice(cols, size=per_row, replace=False)] = 1.0
    if rank is not None:
        a = (rng.random((rows, rank)) < 0.3).astype(float) @ a[:rank]
    return sp.csr_matrix(a)


@pytest.mark.parametrize("shape", [(30, 20, 3, None), (20, 30, 3, None), (40, 40, 2, None),
                                   (50, 30, 4, 12), (30, 60, 5, 18), (25, 25, 1, None)])
def test_the_row_space_test_equals_the_eigenvectors(shape):
    for seed in range(5):
        block = _block(seed, *shape)
        ref = row_space.found_by_eigh(block)
        fast = row_space._found_by_pivoted_cholesky(block)
        assert fast is not None            # these blocks are decided without the fallback
        assert np.array_equal(fast, ref)
        assert np.array_equal(row_space.found_in_row_space(block), ref)


def test_stripping_free_columns_keeps_what_the_rest_decides():
    """Columns left after stripping are found in the stripped block iff in the whole block;
    the stripped ones are not found (the rule that makes stripping exact)."""
    rng = np.random.default_rng(3)
    checked = 0
    for seed in range(30):
        block = _block(seed, int(rng.integers(8, 30)), int(rng.integers(10, 60)), 3)
        ref = row_space.found_by_eigh(block)
        rk, ck = row_space.strip_free_columns(block, np.ones(block.shape[0], dtype=bool),
                                              np.ones(block.shape[1], dtype=bool))
        dropped = np.setdiff1d(np.arange(block.shape[1]), ck)
        assert not ref[dropped].any()
        if len(rk) and len(ck):
            assert np.array_equal(row_space.found_by_eigh(block[rk][:, ck]), ref[ck])
        checked += len(dropped) > 0 and len(rk) < block.shape[0]
    assert checked >= 10        # stripping did something in most cases


def _small_binary_graph(seed, n=150):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, size=3 * n)
    dst = rng.integers(0, n, size=3 * n)
    ei = torch.from_numpy(np.stack([np.concatenate([src, dst]), np.concatenate([dst, src])]))
    x = torch.from_numpy((rng.random((n, 12)) < 0.2).astype(np.float32))
    every = torch.ones(n, dtype=torch.bool)
    graph = GraphData("rand", x, torch.zeros(n, dtype=torch.long), clean_edge_index(ei, n),
                      every, every.clone(), every.clone(), 2)
    return graph, Partition(rng.integers(0, 4, size=n).astype(np.int64), 4)


@pytest.mark.parametrize("kw", [{"hops": 2}, {"hops": 1}, {"hops": 2, "min_contributors": 2},
                                {"hops": 2, "secure_sum": "mask"},
                                {"hops": 1, "one_hop_variant": "paper-code"},
                                {"hops": 2, "min_contributors": 3, "dp_epsilon": 1.0}])
def test_reports_on_random_graphs_equal_the_reference(monkeypatch, kw):
    graph, part = _small_binary_graph(sum(map(ord, str(kw))))
    cfg = Config.from_dict({"clients": 4, **kw})
    fast = leakage_report(graph, part, cfg)
    ref = _reference_report(monkeypatch, graph, part, cfg)
    assert fast == ref
    assert ref["total"]["exact_remote_nodes"] > 0 and ref["server_view"]["nodes_exact"] > 0
    assert ref["total"]["remote_nodes_recoverable"] > 0


@pytest.mark.parametrize("dataset", ["cora", pytest.param("citeseer", marks=pytest.mark.slow)])
def test_the_default_report_on_real_data_equals_the_reference(monkeypatch, data_root, dataset):
    """The defaults of ``fedgl run --algorithm fedgcn --hops 2 --clients 10 --beta 10000``."""
    cfg = Config.from_dict({"dataset": dataset, "data_root": str(data_root), "clients": 10,
                            "hops": 2, "beta": 10000.0, "seed": 0, "progress": False})
    graph = load_graph(cfg)
    part = make_partition(graph, cfg, cfg.seed)
    fast = leakage_report(graph, part, cfg)
    ref = _reference_report(monkeypatch, graph, part, cfg)
    assert fast == ref
    assert ref["total"]["exact_remote_nodes"] > 0 and ref["total"]["exact_unresolved"] > 0


def test_unique_rows_is_numpys_unique_along_rows():
    from fedgl.privacy.sparse_decoding import _unique_rows

    rng = np.random.default_rng(5)
    for rows, cols in [(0, 3), (1, 2), (50, 1), (400, 4), (1000, 9)]:
        m = rng.integers(0, 6, size=(rows, cols))
        groups, inverse = np.unique(m, axis=0, return_inverse=True)
        got_groups, got_inverse = _unique_rows(m)
        assert np.array_equal(got_groups, groups)
        assert np.array_equal(got_inverse, inverse.reshape(-1))


@pytest.mark.parametrize("seed", range(8))
def test_sparse_values_decode_to_the_reference(seed):
    """The released rows given as a sparse matrix (as the report passes them) decode to the
    reference, for binary and three- and four-level alphabets, also with noisy values (every
    value non-zero, none an exact subset sum)."""
    levels = [(0.0, 1.0), (0.0, 0.5, 1.0), (0.0, 1.0, 2.0, 3.0), (0.0, 1.0)][seed % 4]
    system = list(_system(200 + seed, levels=levels, density=0.4, max_members=10))
    if seed >= 4:    # noise well inside the gaps of some sums, outside the tolerance
        rng = np.random.default_rng(seed)
        system[3] = system[3] + rng.choice([0.0, 3e-6, 0.02], size=system[3].shape)
    ref = vd.decode_reference(*system)
    dense = decode_sparse(*system)
    system[3] = sp.csr_matrix(system[3])
    _same(dense, ref)
    _same(decode_sparse(*system), ref)
    _same(vd.decode(*system), ref)
    _same(vd.decode_reference(*system), ref)
    assert ref.known.any() and not ref.known.all()


@pytest.mark.parametrize("levels", [(0.0, 1.0), (0.0, 0.5, 1.0), (0.0, 1.0, 2.0, 3.0)])
def test_sorted_subset_sums_are_the_grids_sums_sorted(levels):
    """The merged subset sums are every assignment's sum, sorted, each beside its row of the
    grid (ties in any order)."""
    from fedgl.privacy.sparse_decoding import _sorted_sums

    rng = np.random.default_rng(len(levels))
    levels = np.asarray(levels)
    for q in range(1, 6):
        c = rng.integers(1, 5, size=(7, q)).astype(np.float64) ** -0.5   # tied scales too
        sums, rows = _sorted_sums(levels, c)
        grid = vd._grid(len(levels), q)
        assert (np.diff(sums, axis=1) >= 0).all()
        for g in range(len(c)):
            assert sorted(rows[g]) == list(range(len(grid)))
            np.testing.assert_allclose(sums[g], levels[grid[rows[g]]] @ c[g], rtol=0,
                                       atol=1e-12)
            np.testing.assert_allclose(sums[g], np.sort(levels[grid] @ c[g]), rtol=0,
                                       atol=1e-12)


def test_feature_levels_are_the_alphabets_indices(monkeypatch):
    import fedgl.privacy.leakage as leakage
    from fedgl.privacy.leakage import _Features

    rng = np.random.default_rng(0)
    for alphabet in ([0.0, 1.0], [0.0, 0.25, 1.0], [0.0, 1.0, 2.0, 5.0], [1.0, 2.0]):
        x = np.asarray(alphabet, dtype=np.float32)[rng.integers(0, len(alphabet), (40, 6))]
        graph = GraphData("x", torch.from_numpy(x), torch.zeros(40, dtype=torch.long),
                          torch.zeros((2, 0), dtype=torch.long),
                          *(torch.ones(40, dtype=torch.bool) for _ in range(3)), 2)
        feats = _Features(graph)
        nodes = np.array([3, 0, 17, 39])
        assert np.array_equal(feats._truth(nodes), np.searchsorted(feats.alphabet, x[nodes]))
        for bound in (10 ** 9, 0):    # one sparse copy, or the system's rows converted
            monkeypatch.setattr(leakage, "MAX_SPARSE_COPY", bound)
            feats._sparse = None
            rows = feats._rows(nodes)
            assert np.array_equal(rows.toarray() if sp.issparse(rows) else rows, x[nodes])
            assert rows.dtype == np.float64


def test_the_report_is_the_same_with_features_converted_per_system(monkeypatch):
    import fedgl.privacy.leakage as leakage

    graph, part = _small_binary_graph(11)
    cfg = Config.from_dict({"clients": 4, "hops": 2})
    once = leakage_report(graph, part, cfg)
    monkeypatch.setattr(leakage, "MAX_SPARSE_COPY", 0)
    assert leakage_report(graph, part, cfg) == once
    assert once["total"]["exact_remote_nodes"] > 0
