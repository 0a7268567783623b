"""All in-process GLASU clients' training calls as one stacked computation (an execution
strategy of the local runtime, like FedGCN's ``fit_many``; the messages are the same).

The ``M`` clients' graphs are laid side by side as one disjoint union: client ``m``'s node ``i``
is row ``m·N + i``. Every per-layer quantity is the clients' rows stacked in client order:

- the node sets ``S_m[l]`` (sampled with :func:`fedgl.data.sampling.expand_nodes` over the
  union of the clients' CSRs, each client's keys from its own generator);
- the blocks: one block-diagonal normalised adjacency ``diag(Â_1[l], ..., Â_M[l])``, so one
  sparse product ``Â H`` computes every client's ``Â_m H_m``;
- the input rows ``X_m[S_m[0]]``: one sparse row gather from ``diag(X_1, ..., X_M)`` (bag-of-
  words features), times the stacked input weights ``[W_in,1; ...; W_in,M]``;
- the sub-layer outputs; only the per-client weight products ``H_m W_m[l]`` and the classifiers
  run client by client (on row slices).

Dropout masks are drawn client by client from each client's own generator, in the order of its
own forward pass, so a stacked round consumes every client's random stream exactly as the
client-by-client round does. The clients' losses are summed before one backward pass: client
``m``'s parameters reach only its own loss (the other clients' embeddings are detached stale
constants), so each gradient is the client's own. Then every client's optimiser steps.

Covered: GCNII (or GCN with sparse input features) with mean aggregation, ``local_stale``
gradients and labels at every client — the paper's main setting. Anything else returns ``None``
and the runtime calls the clients one by one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor

from fedgl.algorithms.glasu.blocks import Block, RowSparse, sampled_block
from fedgl.data.sampling import CSRGraph, expand_nodes

if TYPE_CHECKING:
    from fedgl.algorithms.glasu.client import GlasuClient


@dataclass
class Stack:
    """The clients' stacked graph (built once) and the current round's stacked state."""

    clients: list[GlasuClient]
    n: int  # nodes per client graph
    csr: CSRGraph
    edge_index: Tensor
    xs: RowSparse | None  # block-diagonal sparse features, or None (dense: per-client rows)
    simple: bool = False  # every client graph is simple (see blocks.is_simple)
    sets: dict[int, tuple[Tensor, list[int]]] = field(default_factory=dict)
    blocks: list[Block] = field(default_factory=list)
    state: dict = field(default_factory=dict)
    rows: tuple[Tensor, Any] | None = None

    @classmethod
    def build(cls, clients: list[GlasuClient]) -> Stack:
        n = clients[0].data.num_nodes
        edges = torch.cat([c.data.edge_index + m * n for m, c in enumerate(clients)], dim=1)
        xs = (RowSparse.block_diagonal([c._xs for c in clients])
              if all(c._xs is not None for c in clients) else None)
        return cls(clients, n, CSRGraph.from_edge_index(edges, len(clients) * n), edges, xs,
                   simple=all(c._simple for c in clients))


def supported(group: list[GlasuClient]) -> bool:
    p = group[0].p
    dense_gcn = p.backbone == "gcn" and any(c._xs is None for c in group)
    return (len(group) > 1 and p.aggregate == "mean" and p.grad_mode == "local_stale"
            and p.label_holders == "all" and p.backbone in ("gcn", "gcnii") and not dense_gcn
            and all(c.model.classifier is not None for c in group))


def _stack(group: list[GlasuClient], cache: dict) -> Stack | None:
    if not supported(group):
        return None
    st = cache.get("glasu")
    if st is None or [id(c) for c in st.clients] != [id(c) for c in group]:
        st = cache["glasu"] = Stack.build(group)
    return st


def _split(t: Tensor, counts: list[int]) -> list[Tensor]:
    return list(torch.split(t, counts))


# ---------------------------------------------------------------------------- entry points
def sample_many(group: list[GlasuClient], nodes: Tensor, top: int, cache: dict) -> list | None:
    """:meth:`GlasuClient.sample` of every client (the same broadcast ``S[top]``)."""
    st = _stack(group, cache)
    if st is None:
        return None
    c0, M = group[0], len(group)
    if top == c0.p.layers:
        st.sets, st.state = {}, {"own": {}, "stale": {}}
        for c in group:
            c.sets = {}
    st.sets[top] = (torch.cat([nodes + m * st.n for m in range(M)]), [nodes.numel()] * M)
    bottom = c0._below(top)
    gens = [c.gen for c in group]
    for layer in range(top - 1, bottom - 1, -1):
        ids, counts = st.sets[layer + 1]
        st.sets[layer] = expand_nodes(st.csr, ids, c0.p.fanout, group_size=st.n,
                                      group_counts=counts, generators=gens)
    for layer in range(bottom, top + 1):  # each client's own view of its sets (inspection)
        ids, counts = st.sets[layer]
        for m, (c, part) in enumerate(zip(group, _split(ids, counts), strict=True)):
            c.sets[layer] = part - m * st.n
    if bottom > 0:
        ids, counts = st.sets[bottom]
        return [{"nodes": part - m * st.n} for m, part in enumerate(_split(ids, counts))]
    st.blocks = [sampled_block(st.csr, st.sets[i][0], st.sets[i + 1][0], st.simple)
                 for i in range(c0.p.layers)]
    for c in group:
        if not c.model.training:
            c.model.train()
    out = _segment(st, 1, None, st.state)
    return [{"h": h.detach()} for h in _split(out, st.sets[c0.p.agg[0] + 1][1])]


def forward_many(group: list[GlasuClient], h: Tensor, k: int, cache: dict) -> list | None:
    """:meth:`GlasuClient.forward` of every client (the same broadcast aggregate)."""
    st = _stack(group, cache)
    if st is None or not st.state:
        return None
    inp = _input_from(st, k, h)
    out = _segment(st, k, inp, st.state)
    return [{"h": o.detach()} for o in _split(out, st.sets[group[0].p.agg[k - 1] + 1][1])]


def local_updates_many(group: list[GlasuClient], h: Tensor | None, cache: dict,
                       grad: Tensor | None = None) -> list | None:
    """:meth:`GlasuClient.local_updates` of every client: ``Q`` stacked steps."""
    st = _stack(group, cache)
    if st is None or not st.state or h is None or grad is not None:
        return None
    p = group[0].p
    first: list[float] = []
    for q in range(p.stale_steps):
        top = _input_from(st, len(p.agg) + 1, h) if q == 0 else _full_local_forward(st)
        tops = _dropout(st, top, st.sets[p.layers][1])
        losses = _losses(st, tops)
        for c in group:
            c.opt.zero_grad()
        losses.sum().backward()
        for c in group:
            c.opt.step()
        if q == 0:
            first = [float(v.detach()) for v in losses]
    return [{"loss": v} for v in first]


def _losses(st: Stack, tops: Tensor) -> Tensor:
    """Every client's own cross-entropy on its own classifier (``[M]``); the batch ``S[L]`` has
    the same size at every client, so the classifiers run as one batched product."""
    clients, L = st.clients, st.clients[0].p.layers
    M, rows = len(clients), st.sets[L][1][0]
    w = torch.stack([c.model.classifier.weight for c in clients]).transpose(1, 2)
    b = torch.stack([c.model.classifier.bias for c in clients]).unsqueeze(1)
    logits = torch.baddbmm(b, tops.view(M, rows, -1), w)
    y = torch.cat([c.data.y[c.sets[L]] for c in clients])
    return F.cross_entropy(logits.reshape(M * rows, -1), y, reduction="none").view(M, rows).mean(1)


# ---------------------------------------------------------------------------- stacked forward
def _input_from(st: Stack, k: int, h: Tensor) -> Tensor:
    """Mean: ``H_{-m} = H - H⁺_m / M`` stored, and ``Agg(H_{-m}, H⁺_m) = H_{-m} + H⁺_m / M``."""
    M = len(st.clients)
    own = st.state["own"][k - 1]
    stale = st.state["stale"][k] = (h.repeat(M, 1) - own / M).detach()
    return stale + own / M


def _full_local_forward(st: Stack) -> Tensor:
    state: dict = {"own": {}, "h0": None}
    agg = st.clients[0].p.agg
    h = _segment(st, 1, None, state)
    M = len(st.clients)
    for k in range(2, len(agg) + 2):
        h = st.state["stale"][k] + h / M
        if k <= len(agg):
            h = _segment(st, k, h, state)
    return h


def _dropout(st: Stack, h: Tensor, counts: list[int]) -> Tensor:
    """Each client's mask from its own generator over its own rows (as its own forward draws)."""
    p = st.clients[0].p
    if p.dropout <= 0:
        return h
    if h.is_sparse:
        group = torch.bucketize(h.indices()[0], torch.tensor(counts).cumsum(0), right=True)
        nnz = torch.bincount(group, minlength=len(counts)).tolist()
        keep = torch.cat([torch.rand(k, generator=c.gen) >= p.dropout
                          for c, k in zip(st.clients, nnz, strict=True)])
        return torch.sparse_coo_tensor(h.indices(), h.values() * keep / (1.0 - p.dropout),
                                       h.shape, check_invariants=False)
    keep = torch.cat([torch.rand((k, h.size(1)), generator=c.gen, dtype=h.dtype) >= p.dropout
                      for c, k in zip(st.clients, counts, strict=True)])
    return (h * keep).div_(1.0 - p.dropout)


def _input_rows(st: Stack) -> Tensor | list[Tensor]:
    ids, counts = st.sets[0]
    if st.rows is not None and st.rows[0] is ids:
        return st.rows[1]
    if st.xs is not None:
        rows: Any = st.xs.gather(ids)
    else:
        rows = [c.data.x[part - m * st.n] for m, (c, part)
                in enumerate(zip(st.clients, _split(ids, counts), strict=True))]
    st.rows = (ids, rows)
    return rows


def _first_input(st: Stack, x: Tensor | list[Tensor], counts: list[int]) -> Tensor:
    """GCNII's ``ReLU(X_m W_in,m + b_m)`` for every client at once (sparse) or one by one."""
    models = [c.model for c in st.clients]
    if isinstance(x, list):
        return torch.cat([m.first_input(part) for m, part in zip(models, x, strict=True)])
    w = torch.cat([m.input.weight.t() for m in models])
    b = torch.repeat_interleave(torch.stack([m.input.bias for m in models]),
                                torch.tensor(counts), dim=0)
    return torch.relu(torch.sparse.mm(x, w) + b)


def _segment(st: Stack, k: int, h: Tensor | None, state: dict) -> Tensor:
    c0 = st.clients[0]
    p = c0.p
    gcnii = p.backbone == "gcnii"
    if k == 1:
        x = _input_rows(st)
        counts0 = st.sets[0][1]
        if gcnii:  # GCNII: dropout, then the own input projection H₀
            if isinstance(x, list):
                x = [c._dropout(part) for c, part in zip(st.clients, x, strict=True)]
            else:
                x = _dropout(st, x, counts0)
            h = state["h0"] = _first_input(st, x, counts0)
        else:  # GCN: raw sparse rows (supported() excludes dense raw features)
            assert not isinstance(x, list)
            h = x
    assert h is not None
    for layer in c0._segment_layers(k):
        block = st.blocks[layer]
        h0 = state["h0"][c0._h0_rows(st.blocks, layer)] if gcnii else None
        if layer or gcnii:
            h = _dropout(st, h, st.sets[layer][1])
        h = _layer(st, layer, h, block, h0)
    state["own"][k] = h
    return h


def _per_client_matmul(weights: Tensor, h: Tensor, rows: list[int]) -> Tensor:
    """``H_m W_m`` (``weights[m]``) on each client's rows: one batched product when the clients
    have the same number of rows (a shared node set), else one product per client."""
    if len(set(rows)) == 1:
        return torch.bmm(h.view(len(rows), rows[0], -1), weights).reshape(h.size(0), -1)
    return torch.cat([s @ w for w, s in zip(weights, _split(h, rows), strict=True)])


def _layer(st: Stack, layer: int, h: Tensor, block: Block, h0: Tensor | None) -> Tensor:
    """Every client's sub-layer ``layer`` (see :class:`~fedgl.algorithms.glasu.model.ClientStack`)
    with one block-diagonal sparse product and per-client weight products on row slices."""
    p = st.clients[0].p
    convs = [c.model.convs[layer] for c in st.clients]
    rows = st.sets[layer + 1][1]
    if p.backbone == "gcn":
        if h.is_sparse:  # layer 0 on bag-of-words rows: diag(X_m) [W_1; ...; W_M]
            z = torch.sparse.mm(block.adj, torch.sparse.mm(h, torch.cat([c.weight.t()
                                                                           for c in convs])))
        else:
            if h.size(1) > convs[0].weight.size(0):  # H W first when that is cheaper
                src = _split(h, st.sets[layer][1])
                z = torch.sparse.mm(block.adj, torch.cat([F.linear(s, c.weight)
                                                          for c, s in zip(convs, src,
                                                                          strict=True)]))
            else:
                ah = torch.sparse.mm(block.adj, h)
                z = torch.cat([a @ c.weight.t() for c, a in zip(convs, _split(ah, rows),
                                                                strict=True)])
        bias = torch.repeat_interleave(torch.stack([c.bias for c in convs]), torch.tensor(rows),
                                       dim=0)
        return torch.relu(z + bias)
    support = torch.sparse.addmm(h0, block.adj, h, beta=p.gcnii_alpha, alpha=1 - p.gcnii_alpha)
    beta = math.log(p.gcnii_lambda / (layer + 1) + 1.0)  # every client's (1-β) I + β W at once
    w = torch.stack([c.weight for c in convs]).transpose(1, 2)
    eye = torch.eye(w.size(1), dtype=w.dtype)
    return torch.relu(_per_client_matmul((1 - beta) * eye + beta * w, support, rows))
