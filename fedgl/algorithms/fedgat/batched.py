"""The GAT forward of batched local training (:mod:`fedgl.algorithms.batched`): every GAT
client's training view as one block of a block-diagonal graph, every parameter stacked to
``[K, ...]``, layer by layer with ``GATConv`` / ``PolyGATConv`` semantics.

Used only where it reproduces each client's own ``fit``: SGD, the fast backend or the exact
first layer (the protocol backend's layer 1 comes from per-client matrix stores), every client
on the same device.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.utils import scatter, softmax

from fedgl.algorithms.batched import (
    BlockInput,
    Blocks,
    autograd_step,
    cached_blocks,
    fit_many_or_idle,
    fit_stacked,
    per_client_dropout,
    per_client_linear,
    uniform_group,
)
from fedgl.federation.aggregate import State
from fedgl.models.gat import GAT
from fedgl.models.poly_attention import PolyGATConv

if TYPE_CHECKING:
    from fedgl.algorithms.fedgat.client import GATClient


def can_fit_together(clients: Sequence[GATClient]) -> bool:
    """Whether :func:`fit_together` reproduces these clients' own ``fit``."""
    if not uniform_group(clients):
        return False
    cfg = clients[0].config
    protocol = clients[0].approximate and cfg.fedgat_backend == "protocol"
    return cfg.gat_optimizer == "sgd" and not protocol


def fit_together(clients: Sequence[GATClient], weights: State, local_steps: int,
                 round: int, cache: dict | None = None) -> list[dict]:
    """``[client.fit(weights, local_steps, round) for client in clients]``, as one computation."""

    def fit_active(active: list[GATClient]) -> list[dict]:
        key = tuple(id(c._train_view()) for c in active)
        blocks = cached_blocks(cache, "fit", key,
                               lambda: Blocks([_block_input(c) for c in active]))
        return fit_stacked(active, weights, local_steps, round, blocks,
                           autograd_step(lambda p, b, g: _forward(active[0].model, p, b, g)))

    return fit_many_or_idle(clients, weights, fit_active)


def _block_input(c: GATClient) -> BlockInput:
    v = c._train_view()
    train = c._masks["train"].nonzero().flatten()
    return BlockInput(v.x, {"edges1": v.edges1, "edges_up": v.edges_up}, v.out_rows, c._y[train])


def _layer(conv: torch.nn.Module, p: dict[str, Tensor], prefix: str, blocks: Blocks,
           parts: Sequence[Tensor], edges: Tensor) -> Tensor:
    """One GAT layer (``GATConv`` or ``PolyGATConv`` semantics) with per-client parameters;
    ``parts[k]`` are client k's input rows."""
    heads, c = conv.heads, conv.out_channels
    w = p[prefix + "lin.weight"]                                   # [K, heads*c, d]
    att = torch.stack([p[prefix + "att_dst"].view(blocks.k, heads, c),
                       p[prefix + "att_src"].view(blocks.k, heads, c)], dim=1)  # [K, 2, h, c]
    xw = per_client_linear(parts, w).view(-1, heads, c)
    k_of = blocks.client_of
    s_dst = (xw * att[:, 0][k_of]).sum(-1)                         # [total, heads]
    s_src = (xw * att[:, 1][k_of]).sum(-1)
    src, dst = edges
    if isinstance(conv, PolyGATConv):
        if conv.cap:  # the per-head rescaling of PolyGATConv.attention_vectors, per client
            b = torch.einsum("kshc,khcd->kshd", att, w.view(blocks.k, heads, c, -1))
            norm = b.norm(dim=3).sum(dim=1)                        # ‖b_1‖ + ‖b_2‖, [K, h]
            scale = torch.clamp(conv.attention.radius / norm.clamp_min(1e-30), max=1.0)
            s_src, s_dst = s_src * scale[k_of], s_dst * scale[k_of]
        e_hat = conv.attention(s_dst[dst] + s_src[src], conv.basis)
        alpha = e_hat / scatter(e_hat, dst, dim=0, dim_size=blocks.total, reduce="sum")[dst]
    else:
        alpha = softmax(F.leaky_relu(s_src[src] + s_dst[dst], conv.negative_slope), dst,
                        num_nodes=blocks.total)
    out = scatter(xw[src] * alpha.unsqueeze(-1), dst, dim=0, dim_size=blocks.total,
                  reduce="sum")
    out = out.reshape(blocks.total, heads * c) if conv.concat else out.mean(dim=1)
    return out + p[prefix + "bias"][k_of]


def _forward(model: GAT, p: dict[str, Tensor], blocks: Blocks,
             generators: Sequence[torch.Generator]) -> Tensor:
    """Log-probabilities of every client's output rows (``GAT.forward`` per block)."""
    h = _layer(model.convs[0], p, "convs.0.", blocks, blocks.x, blocks.edges["edges1"])
    for i, conv in enumerate(model.convs[1:], start=1):
        parts = per_client_dropout(F.elu(h), blocks, model.dropout, generators)
        h = _layer(conv, p, f"convs.{i}.", blocks, parts, blocks.edges["edges_up"])
    return torch.log_softmax(h[blocks.out_rows], dim=-1)
