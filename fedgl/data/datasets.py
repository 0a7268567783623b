"""Dataset registry and loaders: Planetoid (Cora, CiteSeer, PubMed), gnn-benchmark npz, SBM,
the large synthetic graphs (``synthetic:arxiv|products|N,E,d,C``, :mod:`fedgl.data.synthetic`).

The data root is ``data_root`` if given, else ``$FEDGL_DATA``, else ``~/.cache/fedgl``. Planetoid
raw files are read in place by :mod:`fedgl.data.planetoid` through a restricted unpickler (nothing
is written next to them, so a read-only root works, and a crafted file cannot run code). When
files are missing, a Planetoid dataset is read from fedgl's own cache, every file checked against
its pinned SHA-256, or downloaded into it (checked before it is kept) if the machine is online
and ``FEDGL_OFFLINE`` is not set (:mod:`fedgl.data.planetoid_cache`).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedgl.data.catalog import (  # noqa: F401 - re-exported: the torch-free part of the registry
    PLANETOID,
    PLANETOID_SUFFIXES,
    available_datasets,
    dataset_problems,
    default_cache_dir,
    planetoid_raw_dir,
    resolve_data_root,
)
from fedgl.data.graph import GraphData, clean_edge_index, row_normalize
from fedgl.data.sbm import stochastic_block_model
from fedgl.data.validate import check_labels, check_public_split, validated
from fedgl.errors import DataError


@validated
def load_dataset(name: str, data_root: str | None = None, *, seed: int = 0,
                 **sbm_options: float) -> GraphData:
    """Load a dataset by name: ``cora``, ``citeseer``, ``pubmed``, ``sbm``, ``npz:PATH``,
    ``synthetic:arxiv|products|N,E,d,C`` (generated once per seed and cached in the user cache),
    ``ogbn-arxiv``, ``ogbn-products``, ``ogbn-papers100M`` (OGB's raw layout under the data root,
    official split) or ``reddit`` (PyG's layout); see :mod:`fedgl.data.ogb`.

    ``sbm_options`` are passed to :func:`~fedgl.data.sbm.stochastic_block_model` (``nodes``,
    ``classes``, ``alpha``, ``mu``, ``features``, ``noise``); ``seed`` seeds the SBM graph and the
    random split of npz datasets (which ship without one).
    """
    key = name.lower()
    if key in PLANETOID:
        return load_planetoid(key, data_root)
    if key == "sbm":
        return stochastic_block_model(seed=seed, **sbm_options)
    if key in ("ogbn-arxiv", "ogbn-products", "ogbn-papers100m"):
        from fedgl.data.ogb import load_ogb

        return load_ogb(key, resolve_data_root(data_root))
    if key == "reddit":
        from fedgl.data.ogb import load_reddit

        return load_reddit(resolve_data_root(data_root))
    if key.startswith("synthetic:"):
        from fedgl.data.synthetic import load_synthetic

        return load_synthetic(name, seed=seed)
    if key.startswith("npz:"):
        path = Path(name[4:]).expanduser()
        if not path.is_absolute() and not path.exists():
            path = resolve_data_root(data_root) / path
        return load_npz(path, seed=seed)
    if key.startswith("own:"):
        raise DataError(f"dataset '{name}' is the organisations' own data: it lives in their "
                        "shards, not in a file fedgl loads; run it with `fedgl run --shards DIR "
                        "...` or deploy the shards (docs/own-data.md)")
    raise DataError(f"unknown dataset '{name}'; use cora, citeseer, pubmed, sbm, npz:PATH, "
                    "ogbn-arxiv, ogbn-products, ogbn-papers100M, reddit or "
                    "synthetic:arxiv|products|N,E,d,C")


def check_datasets(data_root: str | None = None) -> dict[str, str]:
    """Load every named dataset whose files are present and validate it: name -> "ok", the
    one-line problem, "missing", or (a synthetic preset: no files, nothing to validate; building
    ``synthetic:products`` takes minutes) "generated"."""
    out = {}
    for name, present in available_datasets(data_root).items():
        if not present:
            out[name] = "missing"
            continue
        if name.startswith("synthetic:"):
            out[name] = "generated"
            continue
        try:
            load_dataset(name, data_root)
            out[name] = "ok"
        except DataError as exc:
            out[name] = str(exc)
    return out


# ---------------------------------------------------------------------- Planetoid
def _online(host: str = "github.com", timeout: float = 2.0) -> bool:
    if os.environ.get("FEDGL_OFFLINE"):
        return False
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def load_planetoid(key: str, data_root: str | None = None) -> GraphData:
    """Cora / CiteSeer / PubMed with the public split (20 per class, 500 val, 1000 test)."""
    from fedgl.data.planetoid import read_planetoid

    root = resolve_data_root(data_root)
    raw = planetoid_raw_dir(root, key)
    if raw is None:
        raw = _download_planetoid(key, root)
    data = read_planetoid(raw, key)  # DataError (one line) for a damaged or crafted file
    n = int(data["x"].size(0))
    y = data["y"]
    source = f"{PLANETOID[key]} files in '{raw}'"
    graph = GraphData(
        name=key, x=data["x"], y=y, edge_index=clean_edge_index(data["edge_index"], n),
        train_mask=data["train_mask"], val_mask=data["val_mask"],
        test_mask=data["test_mask"], num_classes=check_labels(y, n, source))
    check_public_split(graph, source)
    return graph


def _download_planetoid(key: str, root: Path) -> Path:
    """The dataset from fedgl's own cache (every file verified), else downloaded into it (checked
    before it is kept) when online; see :mod:`fedgl.data.planetoid_cache`."""
    from fedgl.data import planetoid_cache as pc
    from fedgl.data.planetoid import read_planetoid

    folder = PLANETOID[key]
    cached = pc.verified_cache(key, folder)  # DataError for a file fedgl cannot vouch for
    if cached is not None:
        return cached
    if not _online():
        raise DataError(f"{folder} files (ind.{key}.*) not found under '{root}' and the machine is "
                        f"offline; put them in '{root / folder / 'raw'}' or set FEDGL_DATA / "
                        "--data-root")
    return pc.download(key, folder, lambda raw: read_planetoid(raw, key))


# ---------------------------------------------------------------------- gnn-benchmark npz
NPZ_KEYS = ("adj_data", "adj_indices", "adj_indptr", "adj_shape", "labels")


def load_npz(path: str | Path, *, seed: int = 0) -> GraphData:
    """A gnn-benchmark ``.npz`` graph (CSR adjacency and attributes, integer labels).

    These files carry no split, so a seeded Planetoid-style one is drawn: 20 training nodes per
    class, 500 validation and 1000 test nodes (fewer if the graph is small).
    """
    import scipy.sparse as sp

    p = Path(path)
    if not p.is_file():
        raise DataError(f"npz file '{p}' not found; give an existing path after 'npz:'")
    try:
        with np.load(p, allow_pickle=False) as f:
            # both layouts of the format: ``adj_data`` ... and ``adj_matrix.data`` ...
            key = {(k.replace("_matrix.", "_", 1) if k.startswith(("adj_matrix.", "attr_matrix."))
                    else k): k for k in f.files}
            missing = [k for k in NPZ_KEYS if k not in key]
            if missing:
                raise DataError(f"npz file '{p}' lacks {', '.join(missing)}; it must be in the "
                                "gnn-benchmark format (adj_*, attr_* or none, labels)")
            adj = sp.csr_matrix((f[key["adj_data"]], f[key["adj_indices"]], f[key["adj_indptr"]]),
                                shape=tuple(f[key["adj_shape"]]))
            adj.check_format(full_check=True)  # out-of-range indices would fail much later
            if "attr_data" in key:
                attr = sp.csr_matrix((f[key["attr_data"]], f[key["attr_indices"]],
                                      f[key["attr_indptr"]]),
                                     shape=tuple(f[key["attr_shape"]])).toarray()
            elif "attr_matrix" in key:
                attr = np.asarray(f[key["attr_matrix"]])
            else:
                attr = np.eye(adj.shape[0], dtype=np.float32)
            labels = np.asarray(f[key["labels"]])
    except DataError:
        raise
    except Exception as exc:  # noqa: BLE001 - zip/format errors mean a corrupt file
        raise DataError(f"npz file '{p}' is corrupt or not an npz archive "
                        f"({type(exc).__name__}); re-create it") from None
    for what, arr in (("adjacency", adj), ("attributes", attr)):
        if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
            raise DataError(f"npz file '{p}' has {what} of dtype {arr.dtype}, not numbers; "
                            "re-create it")
    n = adj.shape[0]
    if adj.shape[0] != adj.shape[1] or attr.shape[0] != n or labels.shape[0] != n:
        raise DataError(f"npz file '{p}' has inconsistent shapes (adjacency {adj.shape}, "
                        f"attributes {attr.shape}, labels {labels.shape}); re-create it")
    if n == 0:
        raise DataError(f"npz file '{p}' holds an empty graph (0 nodes); use a graph with nodes")
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0:
        raise DataError(f"npz file '{p}' must hold one non-negative integer label per node "
                        f"(got dtype {labels.dtype}, shape {labels.shape}); re-create it")
    coo = adj.tocoo()
    ei = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
    y = torch.from_numpy(labels.astype(np.int64))
    num_classes = check_labels(y, n, f"npz file '{p}'")
    train, val, test = planetoid_style_split(y, num_classes, seed=seed)
    return GraphData(name=p.stem, x=torch.from_numpy(attr.astype(np.float32)), y=y,
                     edge_index=clean_edge_index(ei, n), train_mask=train, val_mask=val,
                     test_mask=test, num_classes=num_classes)


def planetoid_style_split(y: torch.Tensor, num_classes: int, *, seed: int, per_class: int = 20,
                          num_val: int = 500, num_test: int = 1000
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seeded split: ``per_class`` training nodes per class, then validation and test nodes.

    On a graph too small for that (``per_class * num_classes >= n``, which could leave no test
    node) ``per_class`` shrinks to ``max(1, n // (2 * num_classes))``.
    """
    n = int(y.numel())
    if per_class * num_classes >= n:
        per_class = max(1, n // (2 * num_classes))
    rng = np.random.default_rng(seed)
    yn = y.numpy()
    train_idx = np.concatenate([
        rng.permutation(np.flatnonzero(yn == c))[:per_class] for c in range(num_classes)])
    rest = rng.permutation(np.setdiff1d(np.arange(n), train_idx))
    num_val = min(num_val, len(rest) // 2)
    num_test = min(num_test, len(rest) - num_val)
    masks = []
    for idx in (train_idx, rest[:num_val], rest[num_val:num_val + num_test]):
        m = torch.zeros(n, dtype=torch.bool)
        m[torch.from_numpy(idx.astype(np.int64))] = True
        masks.append(m)
    return masks[0], masks[1], masks[2]


def load_graph(cfg: Any) -> GraphData:
    """The dataset a config names, with features row-normalised if asked and non-negative
    (row normalisation is meaningless for signed features such as the SBM's Gaussians)."""
    graph = load_dataset(cfg.dataset, cfg.data_root, seed=cfg.seed, nodes=cfg.sbm_nodes,
                         classes=cfg.sbm_classes, alpha=cfg.sbm_alpha, mu=cfg.sbm_mu,
                         features=cfg.sbm_features, noise=cfg.sbm_noise)
    if cfg.normalize_features and graph.num_nodes and bool((graph.x >= 0).all()):
        graph = graph.with_features(row_normalize(graph.x))
    return graph
