"""GLASU's sampled GCN blocks (the node sets come from the project's sampler,
:func:`fedgl.data.sampling.expand_nodes`).

Sampling (notes A3): ``S[l] = S[l+1] ∪ {≤ f uniformly drawn neighbours of each node of
S[l+1]}`` (all neighbours when ``f < 0`` or the degree is at most ``f``), so ``S[l] ⊇ S[l+1]``.

Block (notes A3): rows ``S[l+1]`` of the symmetric-normalised adjacency with self-loops of the
subgraph the client's edges induce on ``S[l]``:
``Â = D̃^{-1/2} (A_S + I) D̃^{-1/2}``, ``D̃ = diag(1 + deg_S)``, a sparse ``|S[l+1]| × |S[l]|``
matrix; with ``S[l] = S[l+1] = V`` it is the client's full normalised adjacency.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedgl.data.sampling import CSRGraph


@dataclass
class Block:
    """One layer's sampled input/output sets and normalised adjacency rows.

    ``adj`` is sparse ``[len(dst), len(src)]``; ``dst_in_src`` are the positions of ``dst`` in
    ``src`` (for skip connections); ``edges`` are the (row, col) pairs of ``adj`` incl. self-loops
    (for attention)."""

    src: Tensor
    dst: Tensor
    adj: Tensor
    dst_in_src: Tensor
    edges: Tensor


def build_block(edge_index: Tensor, num_nodes: int, src: Tensor, dst: Tensor) -> Block:
    """The sampled block from ``src`` (``S[l]``) to ``dst`` (``S[l+1]`` ⊆ ``S[l]``)."""
    pos = torch.full((num_nodes,), -1, dtype=torch.long)
    pos[src] = torch.arange(src.numel())
    dpos = torch.full((num_nodes,), -1, dtype=torch.long)
    dpos[dst] = torch.arange(dst.numel())
    s, d = pos[edge_index[0]], pos[edge_index[1]]
    inside = (s >= 0) & (d >= 0)
    s, d = s[inside], d[inside]
    deg = 1.0 + torch.bincount(d, minlength=src.numel()).to(torch.get_default_dtype())
    dst_in_src = pos[dst]
    rows = dpos[edge_index[1][inside]]
    keep = rows >= 0
    r = torch.cat([rows[keep], torch.arange(dst.numel())])
    c = torch.cat([s[keep], dst_in_src])
    val = deg[c].rsqrt() * deg[dst_in_src[r]].rsqrt()
    adj = torch.sparse_coo_tensor(torch.stack([r, c]), val, (dst.numel(), src.numel()),
                                  check_invariants=False).coalesce()
    return Block(src, dst, adj, dst_in_src, adj.indices())


def is_simple(csr: CSRGraph) -> bool:
    """No self-loop and no repeated edge (then a block's entries are distinct)."""
    dst = torch.repeat_interleave(torch.arange(csr.num_nodes), csr.indptr[1:] - csr.indptr[:-1])
    key = dst * csr.num_nodes + csr.indices.long()
    return not bool((csr.indices.long() == dst).any()) and key.unique().numel() == key.numel()


@dataclass
class RowSparse:
    """A sparse matrix by rows (compressed rows: the entries of row ``i`` are
    ``col/val[crow[i]:crow[i+1]]``, columns sorted), for gathering bag-of-words rows."""

    crow: Tensor
    col: Tensor
    val: Tensor
    num_cols: int

    @classmethod
    def from_dense(cls, x: Tensor) -> RowSparse:
        rows, cols = torch.nonzero(x, as_tuple=True)  # row-major order
        crow = torch.zeros(x.size(0) + 1, dtype=torch.long)
        crow[1:] = torch.cumsum(torch.bincount(rows, minlength=x.size(0)), 0)
        return cls(crow, cols, x[rows, cols], int(x.size(1)))

    @classmethod
    def block_diagonal(cls, parts: list[RowSparse]) -> RowSparse:
        """``diag(X_1, ..., X_M)``: rows and columns of part ``m`` after those of parts ``< m``."""
        crow, col, row_off, col_off = [torch.zeros(1, dtype=torch.long)], [], 0, 0
        for x in parts:
            crow.append(x.crow[1:] + row_off)
            col.append(x.col + col_off)
            row_off, col_off = row_off + int(x.crow[-1]), col_off + x.num_cols
        return cls(torch.cat(crow), torch.cat(col), torch.cat([x.val for x in parts]), col_off)

    def gather(self, rows: Tensor) -> Tensor:
        """``X[rows]`` as a sparse COO matrix, already in coalesced order (nothing is sorted)."""
        start = self.crow[rows]
        count = self.crow[rows + 1] - start
        r = torch.repeat_interleave(torch.arange(rows.numel()), count)
        first = torch.cumsum(count, 0) - count
        at = start[r] + torch.arange(r.numel()) - first[r]
        return torch.sparse_coo_tensor(torch.stack([r, self.col[at]]), self.val[at],
                                       (rows.numel(), self.num_cols), check_invariants=False,
                                       is_coalesced=True)


def sampled_block(csr: CSRGraph, src: Tensor, dst: Tensor, simple: bool = False) -> Block:
    """:func:`build_block` (the same entries and values) from the CSR rows of ``src`` only, so the
    cost follows the sampled sets, not the whole edge list; entries sorted row-major once.
    ``simple``: the graph is known to be :func:`is_simple` (no duplicate check)."""
    n_src, n_dst = src.numel(), dst.numel()
    pos = torch.full((csr.num_nodes,), -1, dtype=torch.long)
    pos[src] = torch.arange(n_src)
    start = csr.indptr[src]
    deg = csr.indptr[src + 1] - start
    target = torch.repeat_interleave(torch.arange(n_src), deg)  # edge u -> src[target]
    first = torch.cumsum(deg, 0) - deg
    nbr = csr.indices[start[target] + torch.arange(target.numel()) - first[target]]
    c_all = pos[nbr]
    inside = c_all >= 0
    t_in, c_in = target[inside], c_all[inside]
    degree = 1.0 + torch.bincount(t_in, minlength=n_src).to(torch.get_default_dtype())
    dst_in_src = pos[dst]
    row_of = torch.full((n_src,), -1, dtype=torch.long)
    row_of[dst_in_src] = torch.arange(n_dst)
    rows = row_of[t_in]
    keep = rows >= 0
    r = torch.cat([rows[keep], torch.arange(n_dst)])
    c = torch.cat([c_in[keep], dst_in_src])
    key = r * n_src + c
    order = torch.argsort(key)
    key, r, c = key[order], r[order], c[order]
    val = degree[c].rsqrt() * degree[dst_in_src[r]].rsqrt()
    unique = simple or key.numel() < 2 or not bool((key[1:] == key[:-1]).any())
    adj = torch.sparse_coo_tensor(torch.stack([r, c]), val, (n_dst, n_src),
                                  check_invariants=False, is_coalesced=unique)
    if not unique:
        adj = adj.coalesce()
    return Block(src, dst, adj, dst_in_src, adj.indices())


def full_block(edge_index: Tensor, num_nodes: int) -> Block:
    """Every node to every node: the client's full normalised adjacency (evaluation)."""
    every = torch.arange(num_nodes)
    return build_block(edge_index, num_nodes, every, every)
