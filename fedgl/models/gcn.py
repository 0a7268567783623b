"""Graph convolutional network (Kipf & Welling, 2017) on PyG's ``GCNConv``.

Layer l computes ``H^{l+1} = σ(Â H^l W_l + b_l)`` with ``Â = D̃^{-1/2}(A+I)D̃^{-1/2}``. The
normalised edge weights are passed in (``normalize=False`` on the PyG layer), because in the
federation the degrees come from the protocol, not from a local view of the graph.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.nn import GCNConv

from fedgl.models.base import dropout


def gcn_edge_weights(edge_index: Tensor, num_nodes: int, deg_tilde: Tensor
                     ) -> tuple[Tensor, Tensor]:
    """Append self-loops to ``edge_index`` (which must have none) and weight edge (j→i) by
    ``d̃_i^{-1/2} d̃_j^{-1/2}`` with the given self-loop-inclusive degrees ``d̃``."""
    loops = torch.arange(num_nodes, device=edge_index.device)
    ei = torch.cat([edge_index, torch.stack([loops, loops])], dim=1)
    inv_sqrt = deg_tilde.to(torch.float32).pow(-0.5)
    return ei, inv_sqrt[ei[0]] * inv_sqrt[ei[1]]


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
        self.convs = nn.ModuleList(
            GCNConv(dims[i], dims[i + 1], add_self_loops=False, normalize=False)
            for i in range(layers))
        self.dropout = dropout

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None, *,
                pre_aggregated: bool = False, generator: torch.Generator | None = None,
                out_rows: Tensor | None = None) -> Tensor:
        """Log-probabilities for every row, or only ``out_rows`` if given."""
        h = x
        for i, conv in enumerate(self.convs):
            if i == 0 and pre_aggregated:
                h = conv.lin(h) + conv.bias
            else:
                h = conv(h, edge_index, edge_weight)
            if i < len(self.convs) - 1:
                h = dropout(torch.relu(h), self.dropout, self.training, generator)
        if out_rows is not None:
            h = h[out_rows]
        return torch.log_softmax(h, dim=-1)
