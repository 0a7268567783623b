"""Planetoid raw files (``ind.<name>.{x,tx,allx,y,ty,ally,graph,test.index}``) read safely.

The format (Yang et al., 2016): ``allx``/``ally`` hold the features and one-hot labels of the
first nodes (the first ``len(y)`` of them are the training nodes), ``tx``/``ty`` those of the test
nodes listed in ``test.index``, ``graph`` maps a node to its neighbours. Nodes are
``allx ++ tx`` with the test block reordered to its indices; validation = the 500 nodes after the
training ones (the public split). CiteSeer's test indices skip isolated nodes, which get zero
features and label 0 (they are in no split).

Every pickle goes through :func:`fedgl.data.safe_pickle.restricted_load`, which constructs only
numpy/scipy arrays and plain containers: a crafted file is refused before it can run code.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from fedgl.data.csr import CSR
from fedgl.data.safe_pickle import restricted_load
from fedgl.errors import DataError

VALIDATION_NODES = 500


def _dense(obj: object, path: Path) -> np.ndarray:
    if isinstance(obj, CSR):
        return np.asarray(obj.toarray(), dtype=np.float32)
    if isinstance(obj, np.ndarray) and obj.ndim == 2:
        return obj.astype(np.float32)
    raise DataError(f"'{path}' holds {type(obj).__name__}, not a matrix; replace it with an "
                    "intact Planetoid file")


def _same_width(files: dict[str, Path], widths: dict[str, int], what: str, raw: Path) -> None:
    """Files that must have as many columns (e.g. ``tx`` from another dataset does not)."""
    if len(set(widths.values())) > 1:
        listed = ", ".join(f"{files[s].name} {w}" for s, w in widths.items())
        raise DataError(f"Planetoid files in '{raw}' disagree on the number of {what} ({listed}): "
                        "they come from different datasets; replace them with one dataset's "
                        "intact files")


def read_planetoid(raw: str | Path, key: str) -> dict[str, Tensor]:
    """x (float32), y (long), edge_index (as listed: may be one-directional or hold duplicates and
    self-loops) and the public
    train/val/test masks, from the raw files in ``raw``."""
    raw = Path(raw)
    fix = "replace it with an intact Planetoid file"
    files = {s: raw / f"ind.{key}.{s}" for s in ("x", "tx", "allx", "y", "ty", "ally", "graph")}
    loaded = {s: restricted_load(p, fix=fix) for s, p in files.items()}
    tx, allx = _dense(loaded["tx"], files["tx"]), _dense(loaded["allx"], files["allx"])
    y, ty, ally = (_dense(loaded[s], files[s]) for s in ("y", "ty", "ally"))
    graph = loaded["graph"]
    index_path = raw / f"ind.{key}.test.index"
    try:
        test_index = np.array([int(line) for line in index_path.read_text().split()],
                              dtype=np.int64)
    except (OSError, ValueError):
        raise DataError(f"'{index_path}' is not a list of node indices; {fix}") from None
    if not isinstance(graph, dict) or not test_index.size or len(tx) != len(test_index) \
            or len(ty) != len(tx) or len(ally) != len(allx):
        raise DataError(f"Planetoid files in '{raw}' do not fit together; {fix}")
    x_width = _dense(loaded["x"], files["x"]).shape[1]
    _same_width(files, {"x": x_width, "tx": tx.shape[1], "allx": allx.shape[1]}, "features", raw)
    _same_width(files, {"y": y.shape[1], "ty": ty.shape[1], "ally": ally.shape[1]},
                "label columns", raw)
    if len(y) > len(allx):
        raise DataError(f"'{files['y']}' labels {len(y)} training nodes but '{files['allx']}' "
                        f"holds only {len(allx)}; the files come from different datasets, {fix}")
    ordered = np.sort(test_index)
    lo, hi = int(ordered[0]), int(ordered[-1])
    if key == "citeseer":  # isolated test nodes are missing from tx/ty: zero rows in their place
        tx_ext = np.zeros((hi - lo + 1, tx.shape[1]), dtype=tx.dtype)
        ty_ext = np.zeros((hi - lo + 1, ty.shape[1]), dtype=ty.dtype)
        tx_ext[ordered - lo], ty_ext[ordered - lo] = tx, ty
        tx, ty = tx_ext, ty_ext
    x = np.concatenate([allx, tx])
    labels = np.concatenate([ally, ty])
    n = len(x)
    if hi >= n or lo < 0:
        raise DataError(f"'{index_path}' names nodes beyond the {n} in the feature files; {fix}")
    x[test_index] = x[ordered]
    labels = labels.argmax(axis=1)
    labels[test_index] = labels[ordered]
    try:
        pairs = [(int(i), int(j)) for i, nbrs in graph.items() for j in nbrs]
    except (TypeError, ValueError):
        raise DataError(f"'{files['graph']}' is not an adjacency dict; {fix}") from None
    edges = torch.tensor(pairs, dtype=torch.long).reshape(-1, 2).t()
    if edges.numel() and (int(edges.min()) < 0 or int(edges.max()) >= n):
        raise DataError(f"'{files['graph']}' names nodes beyond the {n} in the feature files; {fix}")

    def mask(index: np.ndarray | range) -> Tensor:
        m = torch.zeros(n, dtype=torch.bool)
        m[torch.as_tensor(np.asarray(index), dtype=torch.long)] = True
        return m

    return {"x": torch.from_numpy(x), "y": torch.from_numpy(labels).long(), "edge_index": edges,
            "train_mask": mask(range(len(y))),
            "val_mask": mask(range(len(y), min(len(y) + VALIDATION_NODES, n))),
            "test_mask": mask(test_index)}
