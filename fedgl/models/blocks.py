"""Mini-batch application of fedgl's models on sampled blocks (:mod:`fedgl.data.sampling`).

Every supported layer splits into an element-wise neighbour aggregation and an update, so a
layer can also be computed from a neighbour sum and count assembled elsewhere (the cross-client
exchange of :mod:`fedgl.federation.cross_client`):

- ``sage`` (SAGEConv, mean):  ``h_v' = W_l · (S_v / c_v) + b + W_r · h_v``   (0 when ``c_v = 0``)
- ``gin``  (GINConv, sum):    ``h_v' = MLP((1 + ε) h_v + S_v)``
- ``gcn``  (GCNLayer):        ``h_v' = W · (h_v + S_v) / (1 + c_v) + b``, i.e. the random-walk
  normalisation ``D̃^{-1}(A + I)`` on the sampled neighbourhood (the symmetric ``D̃^{-1/2}`` form
  needs every neighbour's degree and does not compose from per-party partial sums)

with ``S_v = Σ_{u∈Ñ(v)} h_u`` and ``c_v = |Ñ(v)|`` over the sampled neighbours ``Ñ(v)``.
:func:`block_forward` runs the layers themselves (PyG's SAGE and GIN, fedgl's GCN) on the blocks
(the centralised reference and the local training path); :func:`layer_update` is the same
layer from ``(S, c)``.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor, nn

from fedgl.models.base import dropout


class Block(Protocol):
    """What a layer needs of a sampled block (:class:`fedgl.data.sampling.Block`): edges
    (source position, destination position) and the number of destinations, which are the
    first rows of the sources."""

    edge_index: Tensor
    num_dst: int

AGGREGATION = {"sage": "mean", "gin": "sum", "gcn": "mean_self"}


def aggregation_kind(model_name: str) -> str:
    """``mean``, ``sum`` or ``mean_self`` (see module docstring)."""
    try:
        return AGGREGATION[model_name]
    except KeyError:
        raise ValueError(f"model {model_name!r} has no mini-batch form; use sage, gin or gcn") from None


def needs_count(kind: str) -> bool:
    """Whether the neighbour count travels with the sum (mean-type aggregations)."""
    return kind != "sum"


def layer_update(conv: nn.Module, kind: str, h_dst: Tensor, agg_sum: Tensor, count: Tensor) -> Tensor:
    """One layer's output (before the inter-layer activation) from the root rows ``h_dst``, the
    neighbour sums ``agg_sum`` and counts ``count`` (float, one per row)."""
    if kind == "mean":
        mean = agg_sum / count.clamp(min=1.0).unsqueeze(-1)
        return conv.lin_l(mean) + conv.lin_r(h_dst)
    if kind == "sum":
        return conv.nn((1.0 + conv.eps) * h_dst + agg_sum)
    if kind == "mean_self":
        return conv.lin((h_dst + agg_sum) / (1.0 + count).unsqueeze(-1)) + conv.bias
    raise ValueError(f"unknown aggregation {kind!r}")


def conv_on_block(conv: nn.Module, kind: str, h_src: Tensor, block: Block) -> Tensor:
    """The layer applied to one block: outputs for the block's ``num_dst`` destinations."""
    ei, nd = block.edge_index, block.num_dst
    if kind in ("mean", "sum"):
        return conv((h_src, h_src[:nd]), ei, size=(h_src.size(0), nd))
    # the GCN layer has no bipartite form: run it on all rows with edges (and self-loops) into the
    # destinations only, weighted 1 / (1 + sampled degree), and keep the destination rows.
    deg = torch.bincount(ei[1], minlength=nd).to(h_src.dtype)
    loops = torch.arange(nd, device=ei.device)
    full = torch.cat([ei, torch.stack([loops, loops])], dim=1)
    weight = (1.0 / (1.0 + deg))[full[1]]
    return conv(h_src, full, weight)[:nd]


def block_forward(model: nn.Module, kind: str, x: Tensor, blocks: list[Block], *,
                  generator: torch.Generator | None = None) -> Tensor:
    """Log-probabilities of the last block's destinations; ``x`` holds the first block's source
    rows. ReLU and dropout (``model.dropout``, when ``model.training``) between layers."""
    h = x
    last = len(model.convs) - 1
    for i, (conv, block) in enumerate(zip(model.convs, blocks, strict=True)):
        h = conv_on_block(conv, kind, h, block)
        if i < last:
            h = dropout(torch.relu(h), model.dropout, model.training, generator)
    return torch.log_softmax(h, dim=-1)
