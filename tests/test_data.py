"""Loaders: Planetoid (real files), gnn-benchmark npz (a tiny file the test writes), SBM."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from fedgl.data.datasets import load_dataset, resolve_data_root
from fedgl.data.sbm import stochastic_block_model


def test_cora_matches_published_statistics(data_root):
    g = load_dataset("cora", str(data_root))
    assert (g.num_nodes, g.num_features, g.num_classes, g.num_edges) == (2708, 1433, 7, 5278)
    assert int(g.train_mask.sum()) == 140 and int(g.val_mask.sum()) == 500
    assert int(g.test_mask.sum()) == 1000
    assert not bool((g.edge_index[0] == g.edge_index[1]).any())


def test_citeseer_loads(data_root):
    g = load_dataset("citeseer", str(data_root))
    assert (g.num_nodes, g.num_features, g.num_classes) == (3327, 3703, 6)
    assert int(g.train_mask.sum()) == 120


def test_cora_ml_npz_loads(data_root):
    g = load_dataset("npz:npz/cora_ml.npz", str(data_root))
    assert g.num_nodes == 2995 and g.num_classes == 7
    assert int(g.train_mask.sum()) == 140


def test_tiny_npz_roundtrip(tmp_path):
    adj = sp.csr_matrix(np.array([[0, 1, 0, 0], [1, 0, 1, 0], [0, 1, 0, 1], [0, 0, 1, 0]],
                                 dtype=np.float32))
    attr = sp.csr_matrix(np.eye(4, 3, dtype=np.float32))
    path = tmp_path / "tiny.npz"
    np.savez(path, adj_data=adj.data, adj_indices=adj.indices, adj_indptr=adj.indptr,
             adj_shape=adj.shape, attr_data=attr.data, attr_indices=attr.indices,
             attr_indptr=attr.indptr, attr_shape=attr.shape, labels=np.array([0, 1, 0, 1]))
    g = load_dataset(f"npz:{path}")
    assert g.num_nodes == 4 and g.num_features == 3 and g.num_edges == 3
    assert torch.equal(g.x, torch.eye(4, 3))


def test_sbm_is_seeded_and_homophilous():
    a = stochastic_block_model(nodes=500, classes=5, alpha=0.05, mu=0.1, seed=1)
    b = stochastic_block_model(nodes=500, classes=5, alpha=0.05, mu=0.1, seed=1)
    assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.x, b.x)
    same = a.y[a.edge_index[0]] == a.y[a.edge_index[1]]
    # expected within-class share: α/C / (α/C + μα(C-1)/C) = 1 / (1 + 0.1*4) ≈ 0.71
    assert 0.6 < float(same.float().mean()) < 0.8
    expected_edges = 0.05 * (500 / 5) ** 2 / 2 * 5 * (1 + 0.1 * 4)
    assert abs(a.num_edges - expected_edges) < 0.2 * expected_edges


def test_data_root_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("FEDGL_DATA", str(tmp_path / "env"))
    assert resolve_data_root(str(tmp_path / "arg")) == tmp_path / "arg"
    assert resolve_data_root(None) == tmp_path / "env"
    monkeypatch.delenv("FEDGL_DATA")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert resolve_data_root(None) == tmp_path / "cache" / "fedgl"


def test_loader_never_writes_into_the_data_root(data_root):
    before = sorted(p.name for p in (data_root / "Cora").rglob("*"))
    load_dataset("cora", str(data_root))
    assert sorted(p.name for p in (data_root / "Cora").rglob("*")) == before


@pytest.mark.parametrize("name", ["cora", "CiteSeer"])
def test_missing_planetoid_files_offline_is_a_clear_error(tmp_path, monkeypatch, name):
    from fedgl.errors import DataError

    monkeypatch.setenv("FEDGL_OFFLINE", "1")
    with pytest.raises(DataError, match="not found"):
        load_dataset(name, str(tmp_path))
