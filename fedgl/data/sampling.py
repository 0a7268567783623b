"""Uniform neighbour sampling on a CSR graph, producing layered blocks for mini-batch GNNs.

Why this module exists: PyG's ``NeighborLoader`` needs ``pyg-lib`` or ``torch-sparse``, and
neither has a wheel for this platform, so fedgl carries one small vectorised sampler instead.

Sampling (GraphSAGE, Hamilton et al. 2017): starting from the seed nodes, every node of the
current frontier draws ``min(f, deg)`` of its in-neighbours uniformly *without replacement*;
the union of the frontier and the drawn nodes is the next frontier. Drawing without replacement
is done for all frontier nodes at once: every candidate edge gets an i.i.d. uniform key, edges are
ordered by (target, key), and the first ``f`` of each target's run are kept, so each
``f``-subset of a node's neighbours is equally likely. No Python loop runs over nodes.

Fan-out order is PyG's ``NeighborLoader(num_neighbors=...)`` (fedgl's one convention: config,
CLI, API and results): ``num_neighbors[k]`` is the number drawn at hop ``k + 1`` from the seeds,
first layer first, so with ``[15, 10]`` the seeds draw 15 one-hop neighbours and each of those
draws 10. ``-1`` = all. (DGL's ``NeighborSampler`` lists the same numbers input layer first:
DGL's ``[10, 15]``.)

Blocks: ``blocks[l]`` feeds layer ``l`` (input first). Its source nodes are the layer's inputs,
its destination nodes are the first ``num_dst`` of them (the destination set is a prefix of the
source set), and ``edge_index`` is ``[2, E]`` of (source position, destination position). PyG
layers consume a block as ``conv(h_src, block.edge_index)[:block.num_dst]`` (see
:mod:`fedgl.models.blocks`).

Grouped sampling: with ``groups`` (one id per seed), the same node reached from seeds of
different groups is a different instance (one independent mini-batch per group, as when several
clients' batches are sampled together); nodes are deduplicated within a group only.

Layer-wise node sets (:func:`expand_nodes`, GLASU's protocol): ``S[l] = S[l+1] ∪ {≤ f drawn
neighbours of each node of S[l+1]}``, the previous set first, then the new nodes sorted. Several
parties' draws can run as one vectorised call over the disjoint union of their graphs, each
party's keys from its own generator (``generators``), giving exactly the separate draws.
"""

from __future__ import annotations

from collections.abc import Sequence
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
                     generator: torch.Generator | None = None, *,
                     group_counts: list[int] | None = None,
                     generators: Sequence[torch.Generator] | None = None
                     ) -> tuple[Tensor, Tensor]:
    """For every node in ``nodes`` draw ``min(fanout, degree)`` in-neighbours uniformly without
    replacement (all of them when ``fanout < 0``). Returns ``(target_pos, neighbour_id)``: the
    position in ``nodes`` each drawn edge belongs to, and the drawn neighbour's id (int64).

    Per-group generators: with ``group_counts`` (``nodes`` = consecutive runs of that many nodes,
    one run per group) and ``generators`` (one per group), group ``g``'s keys come from
    ``generators[g]`` under the same rule as one call per group, so the draw equals separate
    calls (e.g. several parties' samples over the disjoint union of their graphs, computed in one
    process without mixing their random streams)."""
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
        keys = (torch.rand(total, generator=generator, dtype=torch.float64) if generators is None
                else _group_keys(deg, fanout, group_counts or [], generators))
        order = _by_target_then_key(target, keys, nodes.numel())
        rank = torch.arange(total) - first[target[order]]
        keep = order[rank < fanout]
        target, within = target[keep], within[keep]
    return target, csr.indices[start[target] + within].long()


def _by_target_then_key(target: Tensor, keys: Tensor, num_targets: int) -> Tensor:
    """The permutation sorting candidates by (target, key). One integer sort on the target in
    the high bits and the key's leading bits below; should two candidates of one target share
    those bits (rare), the two-pass sort on the full keys decides, so the result is always that
    of sorting by (target, key)."""
    free = 62 - max(1, num_targets).bit_length()
    if free >= 24:
        combined = (target << free) | (keys * float(1 << free)).long()
        order = torch.argsort(combined)
        ranked = combined[order]
        if not bool((ranked[1:] == ranked[:-1]).any()):
            return order
    order = torch.argsort(keys)
    return order[torch.argsort(target[order], stable=True)]


def _group_keys(deg: Tensor, fanout: int, counts: list[int],
                generators: Sequence[torch.Generator]) -> Tensor:
    """Random keys of the candidate edges, each group's from its own generator (drawn only when
    the group has a node with more than ``fanout`` neighbours, as one call per group would)."""
    if sum(counts) != deg.numel() or len(counts) != len(generators):
        raise ValueError("group_counts must split the nodes into one run per generator")
    keys = []
    for d, gen in zip(torch.split(deg, counts), generators, strict=True):
        n = int(d.sum())
        keys.append(torch.rand(n, generator=gen, dtype=torch.float64) if bool((d > fanout).any())
                    else torch.zeros(n, dtype=torch.float64))  # every candidate is kept
    return torch.cat(keys)


def expand_nodes(csr: CSRGraph, nodes: Tensor, fanout: int,
                 generator: torch.Generator | None = None, *, group_size: int = 0,
                 group_counts: list[int] | None = None,
                 generators: Sequence[torch.Generator] | None = None) -> tuple[Tensor, list[int]]:
    """Layer-wise node-set growth (GLASU's sampling): ``nodes`` followed by the new nodes among
    ``≤ fanout`` uniformly drawn neighbours of each (sorted), so ``nodes`` is a prefix of the
    result. Returns ``(next_nodes, counts)``.

    Grouped (``group_size`` > 0): ``csr`` is the disjoint union of graphs of ``group_size`` nodes
    each (node ``i`` of group ``g`` is ``g * group_size + i``), ``nodes`` are runs of
    ``group_counts`` nodes per group, and ``generators`` one per group; every group's run of the
    result, and its count, equal a separate call on its own graph with its own generator."""
    pos, nbr = sample_neighbors(csr, nodes, fanout, generator, group_counts=group_counts,
                                generators=generators)
    if 16 * (nbr.numel() + nodes.numel()) >= csr.num_nodes:  # a node mask is cheaper than sorting
        seen = torch.zeros(csr.num_nodes, dtype=torch.bool)
        seen[nbr] = True
        seen[nodes] = False
        new = torch.nonzero(seen).flatten()  # sorted, unique, not in nodes
    else:
        new = torch.unique(nbr)
        new = new[~torch.isin(new, nodes)]
    if group_size <= 0:
        return torch.cat([nodes, new]), [int(nodes.numel() + new.numel())]
    counts = group_counts or []
    new_counts = torch.bincount(new // group_size, minlength=len(counts)).tolist()
    parts = zip(torch.split(nodes, counts), torch.split(new, new_counts), strict=True)
    return (torch.cat([t for pair in parts for t in pair]),
            [a + b for a, b in zip(counts, new_counts, strict=True)])


def sample_blocks(csr: CSRGraph, seeds: Tensor, num_neighbors: Sequence[int],
                  generator: torch.Generator | None = None,
                  groups: Tensor | None = None) -> list[Block]:
    """Blocks of an ``len(num_neighbors)``-layer model for ``seeds``. ``num_neighbors`` is per
    hop, first layer (one-hop) first, as PyG's; the blocks come input layer first (see the module
    docstring, also for ``groups``). Seeds must be unique within a group."""
    n = max(csr.num_nodes, 1)
    dst_ids = seeds.long()
    dst_group = torch.zeros_like(dst_ids) if groups is None else groups.long()
    blocks: list[Block] = []
    for fanout in num_neighbors:     # hop 1 (the seeds' neighbours) first
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
