"""OGB (csv.gz and binary npz) and Reddit (PyG npz) loaders on tiny folders the tests write."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from fedgl.data.datasets import available_datasets, load_dataset
from fedgl.data.graph import clean_edge_index
from fedgl.data.ogb import load_ogb
from fedgl.errors import DataError

N = 7
EDGES = np.array([[0, 1], [1, 2], [2, 0], [3, 4], [4, 5], [5, 6], [6, 3], [1, 0], [2, 2]])
FEAT = np.arange(N * 3, dtype=np.float32).reshape(N, 3) / 10
LABEL = np.array([0, 1, 2, 0, 1, 2, 1])
SPLIT = {"train": [0, 3, 5], "valid": [1, 6], "test": [2, 4]}


def _csv_gz(path, arr, fmt):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        np.savetxt(f, arr, delimiter=",", fmt=fmt)


def _write_ogb_csv(root, folder="ogbn_arxiv", split="time"):
    raw = root / folder / "raw"
    _csv_gz(raw / "edge.csv.gz", EDGES, "%d")
    _csv_gz(raw / "node-feat.csv.gz", FEAT, "%.6f")
    _csv_gz(raw / "node-label.csv.gz", LABEL.reshape(-1, 1), "%d")
    _csv_gz(raw / "num-node-list.csv.gz", np.array([[N]]), "%d")
    _csv_gz(raw / "num-edge-list.csv.gz", np.array([[len(EDGES)]]), "%d")
    for part, ids in SPLIT.items():
        _csv_gz(root / folder / "split" / split / f"{part}.csv.gz", np.array(ids).reshape(-1, 1),
                "%d")


def _expected_edges():
    ei = torch.from_numpy(EDGES.T.copy())
    return clean_edge_index(ei, N)


def _check(g, name):
    assert g.name == name and g.num_nodes == N and g.num_classes == 3
    assert torch.equal(g.edge_index, _expected_edges())  # undirected, no loop, no duplicate
    assert torch.allclose(g.x, torch.from_numpy(FEAT))
    assert g.y.tolist() == LABEL.tolist()
    for mask, part in ((g.train_mask, "train"), (g.val_mask, "valid"), (g.test_mask, "test")):
        assert mask.nonzero().flatten().tolist() == SPLIT[part]


@pytest.mark.parametrize("name,folder,split", [("ogbn-arxiv", "ogbn_arxiv", "time"),
                                               ("ogbn-products", "ogbn_products", "sales_ranking")])
def test_ogb_csv_layout(tmp_path, monkeypatch, name, folder, split):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _write_ogb_csv(tmp_path / "data", folder, split)
    g = load_dataset(name, str(tmp_path / "data"))
    _check(g, name)
    assert available_datasets(str(tmp_path / "data"))[name]
    # the parsed arrays are cached in the user cache, never next to the raw files
    assert len(list((tmp_path / "cache" / "fedgl" / "ogb").iterdir())) == 1
    assert sorted(p.name for p in (tmp_path / "data" / folder).iterdir()) == ["raw", "split"]
    _check(load_dataset(name, str(tmp_path / "data")), name)


def test_ogb_binary_layout_papers100m(tmp_path):
    raw = tmp_path / "ogbn_papers100M" / "raw"
    raw.mkdir(parents=True)
    np.savez(raw / "data.npz", edge_index=EDGES.T, node_feat=FEAT, num_nodes_list=np.array([N]),
             num_edges_list=np.array([len(EDGES)]))
    label = LABEL.astype(np.float32)
    label[6] = np.nan  # unlabelled: label 0, in no split
    np.savez(raw / "node-label.npz", node_label=label.reshape(-1, 1))
    for part, ids in SPLIT.items():
        _csv_gz(tmp_path / "ogbn_papers100M" / "split" / "time" / f"{part}.csv.gz",
                np.array(ids).reshape(-1, 1), "%d")
    g = load_ogb("ogbn-papers100M", tmp_path, cache=False)
    assert g.y.tolist() == [0, 1, 2, 0, 1, 2, 0]
    assert not bool(g.val_mask[6]) and g.val_mask.nonzero().flatten().tolist() == [1]
    assert torch.equal(g.edge_index, _expected_edges())


def test_reddit_pyg_layout(tmp_path):
    raw = tmp_path / "Reddit" / "raw"
    raw.mkdir(parents=True)
    types = np.full(N, 3)
    types[SPLIT["train"]] = 1
    types[SPLIT["valid"]] = 2
    np.savez(raw / "reddit_data.npz", feature=FEAT, label=LABEL, node_types=types)
    adj = sp.coo_matrix((np.ones(len(EDGES)), (EDGES[:, 0], EDGES[:, 1])), shape=(N, N))
    sp.save_npz(raw / "reddit_graph.npz", adj.tocsr())
    g = load_dataset("reddit", str(tmp_path))
    _check(g, "reddit")


def test_missing_and_corrupt_files_are_data_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(DataError, match="ogbn_arxiv"):
        load_dataset("ogbn-arxiv", str(tmp_path))
    with pytest.raises(DataError, match="Reddit"):
        load_dataset("reddit", str(tmp_path))
    _write_ogb_csv(tmp_path)
    (tmp_path / "ogbn_arxiv" / "raw" / "node-feat.csv.gz").write_bytes(b"not gzip")
    with pytest.raises(DataError, match="node-feat"):
        load_dataset("ogbn-arxiv", str(tmp_path))
    _write_ogb_csv(tmp_path)
    _csv_gz(tmp_path / "ogbn_arxiv" / "raw" / "edge.csv.gz", np.array([[0, 99]]), "%d")
    with pytest.raises(DataError, match="outside"):
        load_dataset("ogbn-arxiv", str(tmp_path))
