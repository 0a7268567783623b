"""FedGAT (Ambekar et al., "FedGAT: A Privacy-Preserving Federated Approximation Algorithm for
Graph Attention Networks"): polynomial first-layer attention from obfuscation matrices sent once,
then FedAvg; with its paper's baselines DistGAT and centralised GAT. See docs/fedgat.md.

The package imports its code lazily (``from fedgl.algorithms.fedgat import GATClient`` works), so
that looking the algorithms up in the registry imports only ``spec.py``.
"""

from typing import Any

_LAZY = {
    "FedGATClient": "client", "GATClient": "client", "GATView": "client",
    "restrict_view": "client", "GATOracle": "common", "build_gat": "common",
    "cap_in_degree": "common", "gat_initial_weights": "common", "run_gat_federated": "common",
    "scale_features": "common", "FedGATServer": "server", "GATFedAvgServer": "server",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"fedgl.algorithms.fedgat.{_LAZY[name]}"), name)
    raise AttributeError(name)
