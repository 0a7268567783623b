"""Mini-batch local training of a GCN/SAGE client on sampled neighbourhoods, and full-neighbour
inference in bounded memory: what lets the FedAvg-style clients train on products-sized graphs.

A client's :class:`~fedgl.algorithms.base.ModelInputs` (its rows, the edges among them, and which
rows are its own nodes) become a CSR of in-neighbours (self-loops apart) once; then every local
step

1. draws ``batch_size`` of the client's training nodes uniformly without replacement
   (:func:`fedgl.data.sampling.uniform_batch`),
2. samples their neighbourhood on the client's own rows with the project's one sampler
   (:func:`fedgl.data.sampling.sample_blocks`, ``num_neighbors`` first layer first), and
3. runs the model on the sampled blocks and takes one step on the batch's mean loss.

**GCN on a sampled block.** The full layer is ``h_i' = W (w_ii h_i + Σ_{j∈N(i)} w_ij h_j) + b``
with the symmetric weights ``w_ij = n_i n_j`` (``n = d̃^{-1/2}``, the degrees the client's inputs
were normalised with: local ones for 0-hop, the true ones received in FedGCN's 2-hop
pre-training). On a sample ``S(i)`` of ``m_i = min(f, deg_i)`` of the ``deg_i`` neighbours the
neighbour sum is estimated without bias by ``(deg_i / m_i) Σ_{j∈S(i)} w_ij h_j`` (self-loop
always kept). With every neighbour sampled the factor is 1 and the layer is the full one.

**SAGE** (mean aggregation) on a block is PyG's layer on the sampled neighbours
(:func:`fedgl.models.blocks.conv_on_block`): the mean over a sample estimates the mean.

**Pre-aggregated inputs** (FedGCN 1/2-hop: row i holds the exact ``(ÂX)_i`` from the
pre-training sums) need no sampling for the first layer: only layers 2..L are sampled, with
the first ``L - 1`` hops' numbers, ``num_neighbors[:-1]`` (the seeds' hops, nearest first; the
input-most hop, whose aggregation came pre-computed, is not drawn).

With the full fan-out and a batch of every training node, one step equals the full-batch step
(``tests/test_minibatch_fedgcn.py``). The sampler's randomness comes from a generator seeded by
(seed, client, round) at every ``fit``: nothing needs to be checkpointed to resume exactly.

:func:`full_inference` is the exact full-neighbour forward pass, layer by layer, with the
neighbour sums taken ``chunk`` CSR entries at a time (never an edge-sized message tensor).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fedgl.algorithms.minibatch_checks import check_minibatch  # noqa: F401 - its old home
from fedgl.data.sampling import Block, CSRGraph, sample_blocks, uniform_batch
from fedgl.models.base import dropout
from fedgl.models.blocks import conv_on_block, layer_update

#: entries of the CSR (times feature width) aggregated at once by :func:`full_inference`
INFERENCE_CHUNK_VALUES = 1 << 22


@dataclass
class SampledInputs:
    """A client's inputs in the form mini-batch training reads: rows ``x``, the in-neighbour
    CSR among them (no self-loops), the GCN normalisation ``norm`` (``n_i``; None for SAGE),
    the client's own rows, and the training rows with their labels."""

    x: Tensor
    csr: CSRGraph
    norm: Tensor | None
    own_rows: Tensor
    train_rows: Tensor
    y_train: Tensor
    pre_aggregated: bool

    @classmethod
    def build(cls, x: Tensor, edge_index: Tensor, norm: Tensor | None, own_rows: Tensor,
              train: Tensor, y_train: Tensor, pre_aggregated: bool) -> SampledInputs:
        """``edge_index`` (source row, destination row), self-loops allowed (dropped here);
        ``train`` indexes the own nodes that train (``own_rows[train]`` are their rows)."""
        n = int(x.size(0))
        csr = CSRGraph.from_edge_index(edge_index.cpu(), n, dtype=index_dtype(n),
                                       drop_self_loops=True)
        own = own_rows.cpu()
        norm = None if norm is None else norm.to(x.device)   # once, not per step
        return cls(x, csr, norm, own, own[train.cpu()], y_train, pre_aggregated)


def index_dtype(num_nodes: int) -> torch.dtype:
    return torch.int32 if num_nodes < 2**31 else torch.int64


def own_subgraph_keys(node_ids: Tensor, edge_index: Tensor, chunk: int = 1 << 22) -> Tensor:
    """Keys ``dst·n + src`` (local positions in the sorted ``node_ids``, n = their number) of
    the edges of ``edge_index`` (global ids) with both ends in ``node_ids``, self-loops
    dropped; computed ``chunk`` edges at a time (no edge-sized temporaries besides the keys)."""
    n = max(int(node_ids.numel()), 1)
    parts = []
    for a in range(0, int(edge_index.size(1)), chunk):
        src, dst = edge_index[0, a:a + chunk], edge_index[1, a:a + chunk]
        ps = torch.searchsorted(node_ids, src).clamp_(max=n - 1)
        pd = torch.searchsorted(node_ids, dst).clamp_(max=n - 1)
        keep = (node_ids[ps] == src) & (node_ids[pd] == dst) & (src != dst)
        parts.append(pd[keep] * n + ps[keep])
    return torch.cat(parts) if parts else torch.empty(0, dtype=torch.int64)


def sampled_fanouts(num_neighbors: list[int], layers: int, pre_aggregated: bool) -> list[int]:
    """The numbers of the sampled hops (first layer first): all ``layers`` of them, or without
    the input-most hop (the last) when the first layer's aggregation came pre-computed."""
    return list(num_neighbors[:layers - 1]) if pre_aggregated else list(num_neighbors[:layers])


def minibatch_forward(model: torch.nn.Module, kind: str, si: SampledInputs, seeds: Tensor,
                      num_neighbors: list[int], sample_gen: torch.Generator,
                      dropout_gen: torch.Generator | None) -> Tensor:
    """Log-probabilities of the rows ``seeds`` (unique), computed on their sampled
    neighbourhood (see module docstring). ``kind``: ``gcn`` or ``sage``."""
    layers = len(model.convs)
    fans = sampled_fanouts(num_neighbors, layers, si.pre_aggregated)
    blocks = sample_blocks(si.csr, seeds, fans, sample_gen)
    dev = si.x.device
    ids = blocks[0].src_ids if blocks else seeds
    h = si.x[ids.to(dev)]
    offset = 1 if si.pre_aggregated else 0
    for i, conv in enumerate(model.convs):
        if i == 0 and si.pre_aggregated:
            h = conv.lin(h) + conv.bias
        elif kind == "gcn":
            h = gcn_on_block(conv, h, blocks[i - offset], si)
        else:
            h = conv_on_block(conv, "mean", h, _on(blocks[i - offset], dev))
        if i < layers - 1:
            h = dropout(torch.relu(h), model.dropout, model.training, dropout_gen)
    return torch.log_softmax(h, dim=-1)


def _on(block: Block, dev: torch.device) -> Block:
    if block.edge_index.device == dev:
        return block
    return Block(block.src_ids, block.src_group, block.num_dst, block.edge_index.to(dev))


def gcn_on_block(conv: torch.nn.Module, h_src: Tensor, block: Block, si: SampledInputs) -> Tensor:
    """One GCN layer for the block's destinations: symmetric weights ``n_i n_j`` on the sampled
    edges, scaled by ``deg_i / m_i``, plus the self-loop ``n_i²`` (PyG ``GCNConv`` with given
    weights, ``normalize=False``). The weights are computed where ``h_src`` is (the block's
    ids and edges go there once; ``norm`` stays there): no copy of ``norm`` per step."""
    assert si.norm is not None
    dev = h_src.device
    nd = block.num_dst
    full = si.csr.degree(block.src_ids[:nd]).to(dev)   # the CSR stays on the host
    edge_index, src_ids = block.edge_index.to(dev), block.src_ids.to(dev)
    src, dst = edge_index
    dst_ids = src_ids[:nd]
    sampled = torch.bincount(dst, minlength=nd)
    scale = full.to(torch.float32) / sampled.clamp(min=1).to(torch.float32)
    norm = si.norm.to(dev)
    w = norm[src_ids[src]] * norm[dst_ids[dst]] * scale[dst]
    loops = torch.arange(nd, device=dev)
    ei = torch.cat([edge_index, torch.stack([loops, loops])], dim=1)
    weight = torch.cat([w, norm[dst_ids] * norm[dst_ids]])
    return conv(h_src, ei, weight)[:nd]


def local_step_batch(si: SampledInputs, batch_size: int, gen: torch.Generator
                     ) -> tuple[Tensor, Tensor]:
    """(seed rows, their labels) of one step: ``batch_size`` training nodes drawn uniformly
    without replacement (all of them when there are no more)."""
    pick = uniform_batch(torch.arange(si.train_rows.numel()), batch_size, gen)
    return si.train_rows[pick], si.y_train[pick.to(si.y_train.device)]


@torch.no_grad()
def full_inference(model: torch.nn.Module, kind: str, si: SampledInputs,
                   chunk_values: int = INFERENCE_CHUNK_VALUES) -> Tensor:
    """Eval-mode log-probabilities of the own rows (in ``own_rows`` order) with every
    neighbour, layer by layer; neighbour sums are accumulated over CSR chunks of at most
    ``chunk_values / width`` entries. Equals the full-batch forward pass up to float
    summation order.

    Memory: the hidden layers run on every row (their outputs feed the own rows' neighbour
    sums), biases and activations in place; a GCN's last layer is computed for the own rows
    only, ``z_i = n_i² (hW)_i + Σ_{j∈N(i)} n_i n_j (hW)_j + b`` for ``i`` in ``own_rows``, with
    the same products added in the same (CSR) order as on all rows: bitwise the rows a pass
    over every row would give, without a second ``rows × classes`` array (a 2-hop client's
    rows ``V_k ∪ N(V_k)`` are several times its own)."""
    h = si.x
    layers = len(model.convs)
    own = si.own_rows.to(h.device)
    for i, conv in enumerate(model.convs):
        last = i == layers - 1
        if i == 0 and si.pre_aggregated:
            h = conv.lin(h)
            h += conv.bias
        elif kind == "gcn":
            assert si.norm is not None
            hw = conv.lin(h)
            del h
            norm = si.norm.to(hw.device)
            rows = own if last else None
            dst_norm = norm if rows is None else norm[rows]
            out = (hw if rows is None else hw[rows]) * (dst_norm * dst_norm).unsqueeze(1)
            _add_neighbour_sums(out, hw, si.csr, norm, chunk_values, rows)
            del hw
            out += conv.bias
            if last:
                return torch.log_softmax(out, dim=-1)
            h = out
        else:
            sums = torch.zeros_like(h)
            _add_neighbour_sums(sums, h, si.csr, None, chunk_values)
            count = (si.csr.indptr[1:] - si.csr.indptr[:-1]).to(h.dtype).to(h.device)
            h = layer_update(conv, "mean", h, sums, count)
        if not last:
            h.relu_()
    return torch.log_softmax(h[own], dim=-1)


def _add_neighbour_sums(out: Tensor, h: Tensor, csr: CSRGraph, norm: Tensor | None,
                        chunk_values: int, rows: Tensor | None = None) -> None:
    """``out[i] += Σ_{j∈N(i)} (n_i n_j) h_j`` (weights 1 without ``norm``), in CSR chunks;
    with ``rows``, only for those CSR rows, ``out[p]`` being row ``rows[p]``. Each row's terms
    are added in CSR order either way (``index_add_`` on the CPU adds in index order)."""
    indptr = csr.indptr.long()
    lo, hi = 0, int(indptr[-1])
    where = None
    dev = h.device
    if rows is not None:
        if rows.numel() == 0:
            return
        r = rows.long().cpu()
        lo, hi = int(indptr[int(r.min())]), int(indptr[int(r.max()) + 1])
        where = torch.full((csr.num_nodes,), -1, dtype=torch.long)
        where[r] = torch.arange(r.numel())
    step = max(1, chunk_values // max(1, h.size(1)))
    for e0 in range(lo, hi, step):
        e1 = min(hi, e0 + step)
        pos = torch.arange(e0, e1)
        dst = torch.searchsorted(indptr, pos, right=True) - 1
        src = csr.indices[e0:e1].long()
        at = dst
        if where is not None:
            at = where[dst]
            keep = at >= 0
            if not bool(keep.all()):
                at, dst, src = at[keep], dst[keep], src[keep]
        dst, src, at = dst.to(dev), src.to(dev), at.to(dev)
        msg = h[src]
        if norm is not None:
            msg *= (norm[src] * norm[dst]).unsqueeze(1)
        out.index_add_(0, at, msg)
