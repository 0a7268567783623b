"""FedGCN (Yao et al.): one pre-training exchange of neighbour sums, then FedAvg.

The package imports its code lazily (``from fedgl.algorithms.fedgcn import FedGCNClient`` works),
so that looking the algorithm up in the registry imports only ``spec.py``.
"""

from typing import Any

_LAZY = {"FedGCNClient": "fedgl.algorithms.fedgcn.client",
         "FedGCNServer": "fedgl.algorithms.fedgcn.server"}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(name)
