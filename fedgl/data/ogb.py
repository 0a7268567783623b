"""Real large graphs from local files, without the ``ogb`` package: ogbn-arxiv, ogbn-products,
ogbn-papers100M (OGB's raw layout) and Reddit (PyG's npz layout).

OGB layout, under the data root (the folder name as OGB's ``NodePropPredDataset`` creates it)::

    <root>/ogbn_arxiv/raw/edge.csv.gz           E rows "src,dst"
                         node-feat.csv.gz       N rows of d floats
                         node-label.csv.gz      N rows, one class id
                         num-node-list.csv.gz   one row: N
    <root>/ogbn_arxiv/split/time/{train,valid,test}.csv.gz   node ids, one per row

ogbn-products uses ``split/sales_ranking``; ogbn-papers100M ships binary files instead of
csv (``raw/data.npz`` with ``edge_index`` (2, E), ``node_feat``, ``num_nodes_list``, and
``raw/node-label.npz`` with ``node_label``, NaN for unlabelled nodes) and ``split/time``. The
official split is used as is. Every graph is made undirected (arxiv's citations are directed; a
GCN trains on the symmetrised graph), without self-loops or repeated pairs. Unlabelled
papers100M nodes get label 0 and are in no split.

Reddit (PyG layout): ``<root>/Reddit/raw/reddit_data.npz`` (``feature``, ``label``,
``node_types``: 1 train, 2 val, 3 test) and ``reddit_graph.npz`` (a scipy sparse adjacency).

Parsing csv.gz is slow, so the parsed arrays are cached (checksummed) in the user cache,
keyed by the raw files' sizes and modification times; the data root is only read.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import torch

from fedgl.data.cache import cache_root, cached_arrays
from fedgl.data.catalog import OGB, ogb_folder
from fedgl.data.graph import GraphData, csr_edge_index, symmetric_csr
from fedgl.data.synthetic import sorted_unique
from fedgl.errors import DataError

OGB_ARRAYS = ("indptr", "indices", "x", "y", "split")
CSV_CHUNK_ROWS = 1 << 18


def _read_csv_gz(path: Path, dtype: type, cols: int | None = None) -> np.ndarray:
    """A numeric csv.gz (no header) as an array, parsed in chunks of rows."""
    if not path.is_file():
        raise DataError(f"'{path}' not found; the OGB raw folder must hold it (see "
                        "docs/scale.md for the layout)")
    parts = []
    try:
        with gzip.open(path, "rt") as f:
            while True:
                block = np.loadtxt(f, delimiter=",", dtype=dtype, max_rows=CSV_CHUNK_ROWS, ndmin=2)
                if block.size == 0:
                    break
                parts.append(block)
                if len(block) < CSV_CHUNK_ROWS:
                    break
    except (OSError, ValueError, EOFError) as exc:
        raise DataError(f"'{path}' is corrupt or not a numeric csv.gz ({type(exc).__name__}); "
                        "replace it with the original OGB file") from None
    if not parts:
        return np.zeros((0, cols or 1), dtype=dtype)
    return np.concatenate(parts)


def _undirected_csr(src: np.ndarray, dst: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    if len(src) and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
        raise DataError(f"edge list refers to nodes outside 0..{n - 1}; the raw files do not "
                        "belong together, re-extract them")
    lo, hi = np.minimum(src, dst).astype(np.int64), np.maximum(src, dst).astype(np.int64)
    ok = lo != hi
    return symmetric_csr(sorted_unique(lo[ok] * n + hi[ok]), n)


def _split_codes(split_dir: Path, n: int) -> np.ndarray:
    codes = np.full(n, -1, dtype=np.int8)
    for code, part in enumerate(("train", "valid", "test")):
        ids = _read_csv_gz(split_dir / f"{part}.csv.gz", np.int64).reshape(-1)
        if len(ids) and (ids.min() < 0 or ids.max() >= n):
            raise DataError(f"split file '{split_dir / part}.csv.gz' has node ids outside "
                            f"0..{n - 1}; re-extract the dataset")
        codes[ids] = code
    return codes


def _parse_ogb(folder: Path, split_name: str, binary: bool) -> dict[str, np.ndarray]:
    raw = folder / "raw"
    if binary:
        try:
            with np.load(raw / "data.npz") as f:
                n = int(np.asarray(f["num_nodes_list"]).reshape(-1)[0])
                ei = np.asarray(f["edge_index"])
                x = np.asarray(f["node_feat"], dtype=np.float32)
            with np.load(raw / "node-label.npz") as f:
                label = np.asarray(f["node_label"], dtype=np.float64).reshape(-1)
        except (OSError, KeyError, ValueError) as exc:
            raise DataError(f"OGB binary files in '{raw}' are missing or corrupt "
                            f"({type(exc).__name__}: {exc}); need data.npz and node-label.npz"
                            ) from None
        src, dst = ei[0], ei[1]
    else:
        n = int(_read_csv_gz(raw / "num-node-list.csv.gz", np.int64).reshape(-1)[0])
        edges = _read_csv_gz(raw / "edge.csv.gz", np.int64, 2)
        src, dst = edges[:, 0], edges[:, 1]
        x = _read_csv_gz(raw / "node-feat.csv.gz", np.float32)
        label = _read_csv_gz(raw / "node-label.csv.gz", np.float64).reshape(-1)
    if x.shape[0] != n or label.shape[0] != n:
        raise DataError(f"OGB files in '{raw}' disagree on the node count (num-node-list {n}, "
                        f"features {x.shape[0]}, labels {label.shape[0]}); re-extract them")
    labelled = ~np.isnan(label)
    y = np.where(labelled, label, 0).astype(np.int64)
    indptr, indices = _undirected_csr(src, dst, n)
    split = _split_codes(folder / "split" / split_name, n)
    split[~labelled] = -1
    return {"indptr": indptr, "indices": indices, "x": x, "y": y, "split": split}


def _fingerprint(paths: list[Path]) -> str:
    import hashlib

    h = hashlib.sha256()
    for p in sorted(paths):
        st = p.stat()
        h.update(f"{p.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def load_ogb(name: str, root: Path, *, cache_dir: str | Path | None = None,
             cache: bool = True) -> GraphData:
    """ogbn-arxiv / ogbn-products / ogbn-papers100M from ``<root>/ogbn_*`` (module docstring)."""
    key = name.lower()
    if key not in OGB:
        raise DataError(f"unknown OGB dataset '{name}'; use one of {', '.join(OGB)}")
    folder = ogb_folder(key, root)
    if folder is None:
        raise DataError(f"{name} files not found: expected '{root / OGB[key][0] / 'raw'}' in "
                        "OGB's layout (this machine cannot download them); put them there or set "
                        "FEDGL_DATA / --data-root")
    files = [p for p in folder.rglob("*") if p.is_file()]
    tag = f"{key}-{_fingerprint(files)}"
    arrays = cached_arrays(cache_root(cache_dir, "ogb") / tag, OGB_ARRAYS,
                           lambda: _parse_ogb(folder, OGB[key][1], OGB[key][2]),
                           {"dataset": key, "source": str(folder)}, cache)
    return _graph(key, arrays)


def load_reddit(root: Path) -> GraphData:
    """Reddit in PyG's layout (``<root>/Reddit/raw/reddit_{data,graph}.npz``), its own split."""
    import scipy.sparse as sp

    raw = next((c for c in (root / "Reddit" / "raw", root / "reddit" / "raw", root / "Reddit")
                if (c / "reddit_data.npz").is_file()), None)
    if raw is None:
        raise DataError(f"Reddit files not found: expected '{root / 'Reddit' / 'raw'}' with "
                        "reddit_data.npz and reddit_graph.npz; put them there or set FEDGL_DATA")
    try:
        with np.load(raw / "reddit_data.npz") as f:
            x = np.asarray(f["feature"], dtype=np.float32)
            y = np.asarray(f["label"]).astype(np.int64)
            types = np.asarray(f["node_types"]).astype(np.int8)
        adj = sp.load_npz(raw / "reddit_graph.npz").tocoo()
    except (OSError, KeyError, ValueError) as exc:
        raise DataError(f"Reddit files in '{raw}' are missing or corrupt ({type(exc).__name__}); "
                        "need reddit_data.npz (feature, label, node_types) and reddit_graph.npz"
                        ) from None
    n = x.shape[0]
    if y.shape[0] != n or types.shape[0] != n or adj.shape != (n, n):
        raise DataError(f"Reddit files in '{raw}' disagree on the node count; re-extract them")
    indptr, indices = _undirected_csr(adj.row, adj.col, n)
    return _graph("reddit", {"indptr": indptr, "indices": indices, "x": x, "y": y,
                             "split": types - 1})


def _graph(name: str, arrays: dict[str, np.ndarray]) -> GraphData:
    split = torch.from_numpy(arrays["split"].astype(np.int64))
    y = torch.from_numpy(arrays["y"].astype(np.int64))
    return GraphData(name=name, x=torch.from_numpy(np.ascontiguousarray(arrays["x"])), y=y,
                     edge_index=csr_edge_index(arrays["indptr"], arrays["indices"]),
                     train_mask=split == 0, val_mask=split == 1, test_mask=split == 2,
                     num_classes=int(y.max()) + 1 if y.numel() else 0)
