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
    every pair, column indices sorted within rows, int32 when n < 2³¹."""
    import scipy.sparse as sp

    idx = np.int32 if n < 2**31 else np.int64
    lo = (keys // n).astype(idx)
    hi = (keys % n).astype(idx)
    rows = np.concatenate([lo, hi])
    cols = np.concatenate([hi, lo])
    del lo, hi
    mat = sp.csr_matrix((np.ones(len(rows), dtype=np.bool_), (rows, cols)), shape=(n, n))
    del rows, cols
    mat.sort_indices()
    return mat.indptr.astype(np.int64), mat.indices.astype(idx, copy=False)


def csr_edge_index(indptr: np.ndarray, indices: np.ndarray) -> torch.Tensor:
    """The int64 ``[2, nnz]`` edge list (source = column, destination = row) of a symmetric
    CSR adjacency: sorted by destination then source, as
    :func:`~fedgl.data.graph.clean_edge_index` makes it."""
    n = len(indptr) - 1
    dst = torch.repeat_interleave(torch.arange(n), torch.from_numpy(np.diff(indptr)))
    return torch.stack([torch.from_numpy(indices).long(), dst])
