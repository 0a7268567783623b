"""Graph isomorphism network (Xu et al., 2019) on PyG's ``GINConv``:
``h_i' = MLP((1 + ε) h_i + Σ_{j∈N(i)} h_j)`` with ε = 0 and a two-layer MLP per layer."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.nn import GINConv

from fedgl.models.base import dropout


class GIN(nn.Module):
    """L-layer GIN (sum aggregation); each layer's MLP is Linear-ReLU-Linear; ReLU and dropout
    between layers; log-softmax output."""

    def __init__(self, in_channels: int, hidden: int, out_channels: int, layers: int = 2,
                 dropout: float = 0.5) -> None:
        super().__init__()
        dims = [in_channels] + [hidden] * (layers - 1) + [out_channels]
        self.convs = nn.ModuleList(
            GINConv(nn.Sequential(nn.Linear(dims[i], hidden), nn.ReLU(), nn.Linear(hidden, dims[i + 1])))
            for i in range(layers))
        self.dropout = dropout

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None, *,
                generator: torch.Generator | None = None, out_rows: Tensor | None = None
                ) -> Tensor:
        """Log-probabilities; ``edge_weight`` is ignored and self-loops are dropped (the root
        term is separate)."""
        ei = edge_index[:, edge_index[0] != edge_index[1]]
        h = x
        for i, conv in enumerate(self.convs):
            h = conv(h, ei)
            if i < len(self.convs) - 1:
                h = dropout(torch.relu(h), self.dropout, self.training, generator)
        if out_rows is not None:
            h = h[out_rows]
        return torch.log_softmax(h, dim=-1)
