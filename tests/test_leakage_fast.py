"""The fast value-level decoder (sparse passes to the fixed point) equals the reference
(row-by-row passes), cell for cell, and the leakage report built on it equals the report built
on the reference: random systems with tied and generic scales, seeds, two and three levels,
the enumeration bound, and the real Cora/CiteSeer report with the defaults."""

from __future__ import annotations

import numpy as np
import pytest
import torch

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
    monkeypatch.setattr(vd, "decode", decoder)
    return leakage_report(graph, part, cfg)


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
                                {"hops": 2, "secure_sum": "mask"}])
def test_reports_on_random_graphs_equal_the_reference(monkeypatch, kw):
    graph, part = _small_binary_graph(sum(map(ord, str(kw))))
    cfg = Config.from_dict({"clients": 4, **kw})
    fast = _report_with(vd.decode, monkeypatch, graph, part, cfg)
    ref = _report_with(vd.decode_reference, monkeypatch, graph, part, cfg)
    assert fast == ref
    assert ref["total"]["exact_remote_nodes"] > 0 and ref["server_view"]["nodes_exact"] > 0


@pytest.mark.parametrize("dataset", ["cora", pytest.param("citeseer", marks=pytest.mark.slow)])
def test_the_default_report_on_real_data_equals_the_reference(monkeypatch, data_root, dataset):
    """The defaults of ``fedgl run --algorithm fedgcn --hops 2 --clients 10 --beta 10000``."""
    cfg = Config.from_dict({"dataset": dataset, "data_root": str(data_root), "clients": 10,
                            "hops": 2, "beta": 10000.0, "seed": 0, "progress": False})
    graph = load_graph(cfg)
    part = make_partition(graph, cfg, cfg.seed)
    fast = _report_with(vd.decode, monkeypatch, graph, part, cfg)
    ref = _report_with(vd.decode_reference, monkeypatch, graph, part, cfg)
    assert fast == ref
    assert ref["total"]["exact_remote_nodes"] > 0 and ref["total"]["exact_unresolved"] > 0
