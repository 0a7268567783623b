"""GNN models."""

from __future__ import annotations

from torch import nn

from fedgl.models.gcn import GCN, gcn_edge_weights
from fedgl.models.gin import GIN
from fedgl.models.sage import GraphSAGE

__all__ = ["GCN", "GIN", "GraphSAGE", "build_model", "gcn_edge_weights"]


def build_model(name: str, in_channels: int, hidden: int, out_channels: int, layers: int,
                dropout: float) -> nn.Module:
    """Instantiate a model by config name (``gcn``, ``sage`` or ``gin``)."""
    if name == "gcn":
        return GCN(in_channels, hidden, out_channels, layers, dropout)
    if name == "sage":
        return GraphSAGE(in_channels, hidden, out_channels, layers, dropout)
    if name == "gin":
        return GIN(in_channels, hidden, out_channels, layers, dropout)
    raise ValueError(f"unknown model {name!r}")
