"""The full-graph container used before the graph is split across clients.

:class:`GraphData` is what a loader returns. It never enters the federation: the partitioner
turns it into per-client :class:`~fedgl.data.client_data.ClientData`, and only an oracle evaluator
outside the federation may keep it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor


@dataclass
class GraphData:
    """An undirected node-classification graph.

    ``edge_index`` holds both directions of every undirected edge, no self-loops, no duplicates.
    Masks are boolean over nodes (the train/validation/test split).
    """

    name: str
    x: Tensor
    y: Tensor
    edge_index: Tensor
    train_mask: Tensor
    val_mask: Tensor
    test_mask: Tensor
    num_classes: int

    @property
    def num_nodes(self) -> int:
        return int(self.x.size(0))

    @property
    def num_features(self) -> int:
        return int(self.x.size(1))

    @property
    def num_edges(self) -> int:
        """Number of undirected edges."""
        return int(self.edge_index.size(1)) // 2

    def degrees(self) -> Tensor:
        """Node degrees without self-loops."""
        return torch.bincount(self.edge_index[1], minlength=self.num_nodes)

    def __repr__(self) -> str:
        def shape(t: object) -> str:
            return str(list(t.shape)) if isinstance(t, Tensor) else type(t).__name__

        def count(t: object) -> str:
            return str(int(t.sum())) if isinstance(t, Tensor) else type(t).__name__

        return (f"GraphData(name={self.name!r}, x={shape(self.x)}, y={shape(self.y)}, "
                f"edge_index={shape(self.edge_index)}, num_classes={self.num_classes}, "
                f"train/val/test={count(self.train_mask)}/{count(self.val_mask)}/"
                f"{count(self.test_mask)})")

    def with_features(self, x: Tensor) -> GraphData:
        return GraphData(self.name, x, self.y, self.edge_index, self.train_mask, self.val_mask,
                         self.test_mask, self.num_classes)


def clean_edge_index(edge_index: Tensor, num_nodes: int) -> Tensor:
    """Make an edge list undirected, drop self-loops and duplicates, sort by (dst, src)."""
    ei = edge_index.long()
    ei = torch.cat([ei, ei.flip(0)], dim=1)
    ei = ei[:, ei[0] != ei[1]]
    key = torch.unique(ei[1] * num_nodes + ei[0])
    return torch.stack([key % num_nodes, key // num_nodes])


def row_normalize(x: Tensor) -> Tensor:
    """Divide each row by its sum (rows summing to 0 stay 0), as in Kipf & Welling's GCN code."""
    s = x.sum(dim=1, keepdim=True)
    return x / torch.where(s == 0, torch.ones_like(s), s)


def symmetric_csr(keys: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric CSR from sorted distinct pair keys ``lo·n + hi`` (lo < hi): both directions of
    every pair, column indices sorted within rows, int32 when n < 2³¹.

    The (row, column) pairs go to scipy's counting sort, which keeps their order within a row,
    smaller neighbours first: row i receives the ``lo`` of every key with ``hi = i`` (ascending,
    the keys being sorted), then the ``hi`` of every key with ``lo = i`` (ascending), so its
    columns come out sorted and ``sort_indices`` only checks them."""
    import scipy.sparse as sp

    idx = np.int32 if n < 2**31 else np.int64
    lo = (keys // n).astype(idx)
    hi = (keys % n).astype(idx)
    rows = np.concatenate([hi, lo])
    cols = np.concatenate([lo, hi])
    del lo, hi
    mat = sp.csr_matrix((np.ones(len(rows), dtype=np.bool_), (rows, cols)), shape=(n, n))
    del rows, cols
    mat.sort_indices()   # already sorted (see above): a check
    return mat.indptr.astype(np.int64), mat.indices.astype(idx, copy=False)


def csr_edge_index(indptr: np.ndarray, indices: np.ndarray) -> torch.Tensor:
    """The int64 ``[2, nnz]`` edge list (source = column, destination = row) of a symmetric
    CSR adjacency: sorted by destination then source, as
    :func:`~fedgl.data.graph.clean_edge_index` makes it."""
    n, nnz = len(indptr) - 1, len(indices)
    out = torch.empty((2, nnz), dtype=torch.long)   # filled in place: no stacked copies
    out[0].copy_(torch.from_numpy(indices))
    counts = torch.from_numpy(np.diff(indptr))
    # destinations a block of rows at a time (about ``chunk`` entries): no edge-sized temporary
    chunk = 1 << 22
    cuts = np.unique(np.concatenate([[0], np.searchsorted(indptr, np.arange(0, nnz, chunk),
                                                           "right") - 1, [n]]))
    for r0, r1 in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
        a, b = int(indptr[r0]), int(indptr[r1])
        if b > a:
            out[1, a:b] = torch.repeat_interleave(torch.arange(r0, r1), counts[r0:r1],
                                                  output_size=b - a)
    return out


def from_pyg(data: object, name: str = "custom", *, split: int = 0, seed: int = 0) -> GraphData:
    """A :class:`GraphData` from a PyTorch Geometric ``Data`` (``x``, ``y``, ``edge_index`` and,
    if present, ``train_mask``/``val_mask``/``test_mask``), validated.

    Edges are made undirected without self-loops or duplicates. Masks of shape ``[N, S]``
    (several splits) use column ``split``. Without masks a seeded Planetoid-style split is drawn
    (20 training nodes per class, 500 validation, 1000 test). ``y`` of shape ``[N, 1]`` is
    flattened.
    """
    from fedgl.data.datasets import planetoid_style_split
    from fedgl.data.validate import check_labels, validate_graph
    from fedgl.errors import DataError

    missing = [k for k in ("x", "y", "edge_index") if getattr(data, k, None) is None]
    if missing:
        raise DataError(f"from_pyg: the data object has no {', '.join(missing)}; node "
                        "classification needs x, y and edge_index")
    x, y, ei = data.x, data.y, data.edge_index  # type: ignore[attr-defined]
    if not all(isinstance(t, Tensor) for t in (x, y, ei)):
        raise DataError("from_pyg: x, y and edge_index must be torch tensors")
    if y.dim() == 2 and y.size(1) == 1:
        y = y.view(-1)
    n = int(x.size(0)) if x.dim() == 2 else -1
    num_classes = check_labels(y, n, f"from_pyg({name})")
    y = y.long()
    if ei.dim() != 2 or ei.size(0) != 2 or ei.dtype.is_floating_point:
        raise DataError(f"from_pyg({name}): edge_index must be integer ids of shape [2, E] (got "
                        f"{ei.dtype}, {list(ei.shape)})")
    if ei.numel() and (int(ei.min()) < 0 or int(ei.max()) >= n):
        raise DataError(f"from_pyg({name}): an edge names a node outside 0..{n - 1}; fix "
                        "edge_index")
    masks = [getattr(data, f"{s}_mask", None) for s in ("train", "val", "test")]
    if all(m is None for m in masks):
        masks = list(planetoid_style_split(y, num_classes, seed=seed))
    elif any(m is None for m in masks):
        raise DataError(f"from_pyg({name}): the data has only some of train_mask, val_mask, "
                        "test_mask; give all three or none (a seeded split is drawn)")
    else:
        masks = [m[:, split] if m.dim() == 2 else m for m in masks]
    graph = GraphData(name=name, x=x.float(), y=y,
                      edge_index=clean_edge_index(ei, n) if ei.numel() else ei.long(),
                      train_mask=masks[0].bool(), val_mask=masks[1].bool(),
                      test_mask=masks[2].bool(), num_classes=num_classes)
    return validate_graph(graph, f"from_pyg({name})")
