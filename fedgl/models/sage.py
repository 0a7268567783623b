"""GraphSAGE (Hamilton et al., 2017) with mean aggregation on PyG's ``SAGEConv``:
``h_i' = W_1 h_i + W_2 mean_{j∈N(i)} h_j``."""

from __future__ import annotations

from torch import nn
from torch_geometric.nn import SAGEConv

from fedgl.models.base import RootSeparateStack


class GraphSAGE(RootSeparateStack):
    """L-layer mean-aggregation GraphSAGE with ReLU and dropout between layers."""

    def __init__(self, in_channels: int, hidden: int, out_channels: int, layers: int = 2,
                 dropout: float = 0.5) -> None:
        super().__init__()
        dims = [in_channels] + [hidden] * (layers - 1) + [out_channels]
        self.convs = nn.ModuleList(SAGEConv(dims[i], dims[i + 1]) for i in range(layers))
        self.dropout = dropout
