"""GNN models. GCN is fedgl's own layer; GraphSAGE and GIN (PyG layers) are imported when a
model that uses them is built, so a GCN run does not import PyG."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import nn

from fedgl.models.gcn import GCN, gcn_edge_weights

if TYPE_CHECKING:  # pragma: no cover
    from fedgl.models.gin import GIN
    from fedgl.models.sage import GraphSAGE

__all__ = ["GCN", "GIN", "GraphSAGE", "build_model", "gcn_edge_weights"]


def __getattr__(name: str) -> Any:
    if name == "GIN":
        from fedgl.models.gin import GIN

        return GIN
    if name == "GraphSAGE":
        from fedgl.models.sage import GraphSAGE

        return GraphSAGE
    raise AttributeError(f"module 'fedgl.models' has no attribute '{name}'")


def build_model(name: str, in_channels: int, hidden: int, out_channels: int, layers: int,
                dropout: float) -> nn.Module:
    """Instantiate a model by config name (``gcn``, ``sage`` or ``gin``)."""
    if name == "gcn":
        return GCN(in_channels, hidden, out_channels, layers, dropout)
    if name == "sage":
        from fedgl.models.sage import GraphSAGE

        return GraphSAGE(in_channels, hidden, out_channels, layers, dropout)
    if name == "gin":
        from fedgl.models.gin import GIN

        return GIN(in_channels, hidden, out_channels, layers, dropout)
    raise ValueError(f"unknown model {name!r}")
