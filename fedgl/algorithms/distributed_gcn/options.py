"""Distributed GCN has no keys of its own; its options only check the model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedgl.algorithms.boundary.checks import require_gcn


@dataclass(frozen=True)
class DistributedGCNOptions:
    """Distributed GCN (Scardapane et al. 2020): every boundary node, every layer, every step."""

    def validate(self, cfg: Any) -> None:
        require_gcn(cfg, "distributed-gcn")
