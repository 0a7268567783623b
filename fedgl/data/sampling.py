"""Uniform neighbour sampling on a CSR graph, producing layered blocks for mini-batch GNNs.

Why this module exists: PyG's ``NeighborLoader`` needs ``pyg-lib`` or ``torch-sparse``, and
neither has a wheel for this platform, so fedgl carries one small vectorised sampler instead.

Sampling (GraphSAGE, Hamilton et al. 2017): starting from the seed nodes, every node of the
current frontier draws ``min(f, deg)`` of its in-neighbours uniformly *without replacement*;
the union of the frontier and the drawn nodes is the next frontier. Drawing without replacement
is done for all frontier nodes at once: every candidate edge gets an i.i.d. uniform key, edges are
ordered by (target, key), and the first ``f`` of each target's run are kept, so each
``f``-subset of a node's neighbours is equally likely. No Python loop runs over nodes.

Fan-out order follows DGL's ``NeighborSampler`` (the convention of the Swift-FedGNN paper's
scripts): ``fanouts[l]`` is the fan-out of model layer ``l`` counted from the input, so with
``[15, 10]`` the seeds draw 10 one-hop neighbours and each of those draws 15. ``-1`` = all.

Blocks: ``blocks[l]`` feeds layer ``l`` (input first). Its source nodes are the layer's inputs,
its destination nodes are the first ``num_dst`` of them (the destination set is a prefix of the
source set), and ``edge_index`` is ``[2, E]`` of (source position, destination position). PyG
layers consume a block as ``conv(h_src, block.edge_index)[:block.num_dst]`` (see
:mod:`fedgl.models.blocks`).

Grouped sampling: with ``groups`` (one id per seed), the same node reached from seeds of
different groups is a different instance (one independent mini-batch per group, as when several
clients' batches are sampled together); nodes are deduplicated within a group only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class CSRGraph:
    """In-neighbour lists: the neighbours of node ``i`` are ``indices[indptr[i]:indptr[i+1]]``."""

    indptr: Tensor
    indices: Tensor

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.numel()) - 1

    @classmethod
    def from_edge_index(cls, edge_index: Tensor, num_nodes: int,
                        dtype: torch.dtype = torch.int64,
                        drop_self_loops: bool = False) -> CSRGraph:
        """CSR over destinations of ``edge_index`` columns ``(src, dst)``; ``dtype`` is int32 or
        int64 for the stored indices (int32 halves memory on large graphs). Neighbours are in
        ascending order. One int64 key ``dst·N + src`` per edge is sorted in place (no index
        array, no gathered copy): about 16 bytes per edge at the peak."""
        n = max(num_nodes, 1)
        src, dst = edge_index[0].long(), edge_index[1].long()
        if drop_self_loops:
            keep = src != dst
            keys = dst[keep] * n
            keys += src[keep]
        else:
            keys = dst * n
            keys += src
        return cls.from_keys(keys, num_nodes, dtype)

    @classmethod
    def from_keys(cls, keys: Tensor, num_nodes: int,
                  dtype: torch.dtype = torch.int64) -> CSRGraph:
        """CSR from int64 edge keys ``dst·N + src`` (N = ``max(num_nodes, 1)``), which are
        sorted in place and then overwritten: the caller hands the tensor over."""
        n = max(num_nodes, 1)
        if keys.is_cpu:
            keys.numpy().sort()
        else:
            keys = torch.sort(keys).values
        counts = torch.bincount(torch.div(keys, n, rounding_mode="floor"), minlength=num_nodes)
        keys.remainder_(n)  # now the sources, ordered by (destination, source)
        indptr = torch.zeros(num_nodes + 1, dtype=torch.int64)
        torch.cumsum(counts, 0, out=indptr[1:])
        return cls(indptr.to(dtype), keys.to(dtype))

    def degree(self, nodes: Tensor) -> Tensor:
        nodes = nodes.long()
        return (self.indptr[nodes + 1] - self.indptr[nodes]).long()


@dataclass
class Block:
    """One layer's bipartite sample: ``src_ids`` global node ids of the inputs (destinations
    first), ``edge_index`` (source position, destination position), ``num_dst`` outputs.
    ``src_group`` is the group of every source instance (all zeros without groups)."""

    src_ids: Tensor
    src_group: Tensor
    num_dst: int
    edge_index: Tensor

    @property
    def dst_ids(self) -> Tensor:
        return self.src_ids[: self.num_dst]

    @property
    def num_src(self) -> int:
        return int(self.src_ids.numel())


def sample_neighbors(csr: CSRGraph, nodes: Tensor, fanout: int,
                     generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """For every node in ``nodes`` draw ``min(fanout, degree)`` in-neighbours uniformly without
    replacement (all of them when ``fanout < 0``). Returns ``(target_pos, neighbour_id)``: the
    position in ``nodes`` each drawn edge belongs to, and the drawn neighbour's id (int64)."""
    nodes = nodes.long()
    start = csr.indptr[nodes].long()
    deg = csr.indptr[nodes + 1].long() - start
    total = int(deg.sum())
    if total == 0:
        empty = torch.empty(0, dtype=torch.int64)
        return empty, empty.clone()
    target = torch.repeat_interleave(torch.arange(nodes.numel()), deg)
    first = torch.cumsum(deg, 0) - deg  # offset of each target's run in the candidate list
    within = torch.arange(total) - first[target]
    if fanout >= 0 and bool((deg > fanout).any()):
        keys = torch.rand(total, generator=generator, dtype=torch.float64)
        order = torch.argsort(keys)
        order = order[torch.argsort(target[order], stable=True)]  # by target, then random key
        rank = torch.arange(total) - first[target[order]]
        keep = order[rank < fanout]
        target, within = target[keep], within[keep]
    return target, csr.indices[start[target] + within].long()


def sample_blocks(csr: CSRGraph, seeds: Tensor, fanouts: list[int],
                  generator: torch.Generator | None = None,
                  groups: Tensor | None = None) -> list[Block]:
    """Blocks of an ``len(fanouts)``-layer model for ``seeds`` (input layer first; see module
    docstring for the fan-out order and for ``groups``). Seeds must be unique within a group."""
    n = max(csr.num_nodes, 1)
    dst_ids = seeds.long()
    dst_group = torch.zeros_like(dst_ids) if groups is None else groups.long()
    blocks: list[Block] = []
    for fanout in reversed(fanouts):
        pos, nbr = sample_neighbors(csr, dst_ids, fanout, generator)
        nbr_group = dst_group[pos]
        dst_key = dst_group * n + dst_ids
        nbr_key = nbr_group * n + nbr
        new_key = torch.unique(nbr_key[~torch.isin(nbr_key, dst_key)])
        src_key = torch.cat([dst_key, new_key])
        sorted_key, perm = torch.sort(src_key)
        src_pos = perm[torch.searchsorted(sorted_key, nbr_key)]
        src_ids, src_group = src_key % n, src_key // n
        blocks.append(Block(src_ids, src_group, int(dst_ids.numel()), torch.stack([src_pos, pos])))
        dst_ids, dst_group = src_ids, src_group
    return blocks[::-1]


def full_block(edge_index: Tensor, num_nodes: int) -> Block:
    """Every node with all its in-neighbours: the block of full-graph (inference) message passing."""
    ids = torch.arange(num_nodes)
    return Block(ids, torch.zeros_like(ids), num_nodes, edge_index.long())


def uniform_batch(pool: Tensor, batch_size: int, generator: torch.Generator | None = None) -> Tensor:
    """``batch_size`` distinct elements of ``pool`` drawn uniformly (all of it when the pool is no
    larger than the batch or ``batch_size <= 0``), returned sorted."""
    if batch_size <= 0 or pool.numel() <= batch_size:
        return pool.clone()
    pick = torch.randperm(pool.numel(), generator=generator)[:batch_size]
    return torch.sort(pool[pick]).values
