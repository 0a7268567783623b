"""Graph convolutional network (Kipf & Welling, 2017) with given edge weights.

Layer l computes ``H^{l+1} = σ(Â H^l W_l + b_l)`` with ``Â = D̃^{-1/2}(A+I)D̃^{-1/2}``. The
normalised edge weights are passed in, because in the federation the degrees come from the
protocol, not from a local view of the graph. With the weights given, PyG's
``GCNConv(normalize=False, add_self_loops=False)`` is a linear map and one weighted
scatter-sum; :class:`GCNLayer` is that layer in a few torch lines, with the same parameters,
initialisation draws and operations (so the same results bit for bit,
tests/test_gcn_layer.py), because importing PyG is most of a run's start-up time.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedgl.models.base import dropout, scatter_sum


def gcn_edge_weights(edge_index: Tensor, num_nodes: int, deg_tilde: Tensor
                     ) -> tuple[Tensor, Tensor]:
    """Append self-loops to ``edge_index`` (which must have none) and weight edge (j→i) by
    ``d̃_i^{-1/2} d̃_j^{-1/2}`` with the given self-loop-inclusive degrees ``d̃``."""
    loops = torch.arange(num_nodes, device=edge_index.device)
    ei = torch.cat([edge_index, torch.stack([loops, loops])], dim=1)
    inv_sqrt = deg_tilde.to(torch.float32).pow(-0.5)
    return ei, inv_sqrt[ei[0]] * inv_sqrt[ei[1]]


class LinearMap(nn.Module):
    """``x W^T`` without bias (parameter ``weight``, [out, in]), as PyG's ``Linear(bias=False)``."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels))

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight)


class GCNLayer(nn.Module):
    """``out_i = b + Σ_{(j→i)} w_ji (x_j W^T)``: PyG's ``GCNConv(in, out, normalize=False,
    add_self_loops=False)`` (parameters ``lin.weight`` [out, in] and ``bias`` [out], Glorot
    weights drawn as it draws them, zero bias). ``edge_index`` is ``[source; target]``; without
    ``edge_weight`` every edge weighs 1."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.lin = LinearMap(in_channels, out_channels)
        self.bias = nn.Parameter(torch.empty(out_channels))
        # PyG draws the Glorot weights twice (its Linear's constructor, then the layer's
        # reset_parameters): drawing them twice here keeps the global RNG stream the same.
        self.reset_parameters()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot-uniform weights, zero bias."""
        bound = math.sqrt(6.0 / (self.in_channels + self.out_channels))
        with torch.no_grad():
            self.lin.weight.uniform_(-bound, bound)
            self.bias.zero_()

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None, *,
                num_out: int | None = None) -> Tensor:
        """``num_out`` rows out (default: as many as ``x``); ``edge_index[1]`` numbers them."""
        h = self.lin(x)
        msg = h.index_select(-2, edge_index[0])
        if edge_weight is not None:
            msg = edge_weight.view(-1, 1) * msg
        return scatter_sum(msg, edge_index[1], h.size(0) if num_out is None else num_out) \
            + self.bias

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}"


def edges_into(rows: Tensor, edge_index: Tensor, edge_weight: Tensor | None, num_nodes: int
               ) -> tuple[Tensor, Tensor | None] | None:
    """``(edge_index, edge_weight)`` of the edges whose target is one of ``rows``, in their
    order, targets renumbered by position in ``rows``: what a last layer needs to compute only
    ``rows`` (``GCN.forward(..., out_rows=rows, out_edges=...)``), each row's sum in the same
    order as over all edges. None where ``rows`` repeats a node."""
    src, dst = edge_index
    position = torch.full((num_nodes,), -1, dtype=torch.long, device=dst.device)
    position[rows] = torch.arange(rows.numel(), device=dst.device)
    if int((position >= 0).sum()) != rows.numel():
        return None
    into = position[dst] >= 0
    weight = None if edge_weight is None else edge_weight[into]
    return torch.stack([src[into], position[dst[into]]]), weight


class GCN(nn.Module):
    """L-layer GCN: ReLU between layers, dropout between layers (FedGCN appendix E.2), and
    log-softmax output.

    ``forward(x, ...)`` is the ordinary GCN. ``forward(agg, ..., pre_aggregated=True)`` takes the
    first layer's aggregation ``ÂX`` as input and applies only its linear map, so that
    ``(ÂX)W_1 + b_1 = Â(XW_1) + b_1``: this is how FedGCN clients use the received neighbour sums.
    """

    def __init__(self, in_channels: int, hidden: int, out_channels: int, layers: int = 2,
                 dropout: float = 0.5) -> None:
        super().__init__()
        dims = [in_channels] + [hidden] * (layers - 1) + [out_channels]
        self.convs = nn.ModuleList(GCNLayer(dims[i], dims[i + 1]) for i in range(layers))
        self.dropout = dropout

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None, *,
                pre_aggregated: bool = False, generator: torch.Generator | None = None,
                out_rows: Tensor | None = None,
                distinct: tuple[Tensor, Tensor] | None = None,
                out_edges: tuple[Tensor, Tensor | None] | None = None) -> Tensor:
        """Log-probabilities for every row, or only ``out_rows`` if given.

        ``distinct = (rows, index)`` with ``x == rows[index]`` (bit for bit, pre-aggregated
        input): the first layer's product is computed once per distinct row,
        ``(rows W_1^T)[index]``, the same floats as ``x W_1^T`` (each output row of the product
        depends only on its input row). In evaluation (no dropout) the rows stay distinct through
        the bias, the ReLU and the next layer's product, all row by row, and are gathered only
        where that layer's edges read them: the same floats again.

        ``out_edges = (edge_index, edge_weight)``: with ``out_rows``, the last layer's edges
        into ``out_rows`` only, in their order in ``edge_index`` and with targets numbered by
        position in ``out_rows`` (:meth:`fedgl.algorithms.batched.Blocks.out_edges`): the last
        layer then sums only the rows it returns, each in the same order as over all edges."""
        h, index = x, None   # index: where set, this layer's input rows are h[index]
        last = len(self.convs) - 1
        for i, conv in enumerate(self.convs):
            if i == 0 and pre_aggregated:
                if distinct is None:
                    h = conv.lin(h) + conv.bias
                elif self.training:
                    h = conv.lin(distinct[0]).index_select(0, distinct[1]) + conv.bias
                else:
                    h, index = conv.lin(distinct[0]) + conv.bias, distinct[1]
            else:
                ei, ew, num_out = edge_index, edge_weight, None
                if i == last and out_rows is not None and out_edges is not None:
                    (ei, ew), num_out, out_rows = out_edges, out_rows.numel(), None
                if index is not None:   # gathered where the edges read the rows
                    ei = torch.stack([index[ei[0]], ei[1]])
                    num_out = index.numel() if num_out is None else num_out
                    index = None
                h = conv(h, ei, ew, num_out=num_out)
            if i < last:
                h = dropout(torch.relu(h), self.dropout, self.training, generator)
        if index is not None:
            h = h.index_select(0, index)
        if out_rows is not None:
            h = h[out_rows]
        return torch.log_softmax(h, dim=-1)
