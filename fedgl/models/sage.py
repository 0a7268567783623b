"""GraphSAGE (Hamilton et al., 2017) with mean aggregation on PyG's ``SAGEConv``:
``h_i' = W_1 h_i + W_2 mean_{j∈N(i)} h_j``."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.nn import SAGEConv

from fedgl.models.base import dropout


class GraphSAGE(nn.Module):
    """L-layer mean-aggregation GraphSAGE with ReLU and dropout between layers."""

    def __init__(self, in_channels: int, hidden: int, out_channels: int, layers: int = 2,
                 dropout: float = 0.5) -> None:
        super().__init__()
        dims = [in_channels] + [hidden] * (layers - 1) + [out_channels]
        self.convs = nn.ModuleList(SAGEConv(dims[i], dims[i + 1]) for i in range(layers))
        self.dropout = dropout

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None, *,
                generator: torch.Generator | None = None, out_rows: Tensor | None = None
                ) -> Tensor:
        """Log-probabilities; ``edge_weight`` is ignored (mean aggregation), self-loops in
        ``edge_index`` are dropped since SAGE keeps the root term separately."""
        ei = edge_index[:, edge_index[0] != edge_index[1]]
        h = x
        for i, conv in enumerate(self.convs):
            h = conv(h, ei)
            if i < len(self.convs) - 1:
                h = dropout(torch.relu(h), self.dropout, self.training, generator)
        if out_rows is not None:
            h = h[out_rows]
        return torch.log_softmax(h, dim=-1)
