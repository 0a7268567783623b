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


def full_block(edge_index: Tensor, num_nodes: int) -> Block:
    """Every node to every node: the client's full normalised adjacency (evaluation)."""
    every = torch.arange(num_nodes)
    return build_block(edge_index, num_nodes, every, every)
