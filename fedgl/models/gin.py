"""Graph isomorphism network (Xu et al., 2019) on PyG's ``GINConv``:
``h_i' = MLP((1 + ε) h_i + Σ_{j∈N(i)} h_j)`` with ε = 0 and a two-layer MLP per layer."""

from __future__ import annotations

from torch import nn
from torch_geometric.nn import GINConv

from fedgl.models.base import RootSeparateStack


class GIN(RootSeparateStack):
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
