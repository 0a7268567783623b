"""BNS-GCN's own configuration keys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedgl.algorithms.boundary.checks import require_gcn
from fedgl.config.fields import option
from fedgl.errors import ConfigError


@dataclass(frozen=True)
class BNSGCNOptions:
    """BNS-GCN (Wan et al. 2022; "BDS-GCN" in the FedGCN paper): random boundary-node sampling."""

    boundary_rate: float = option(0.1, "ρ: fraction of each client's cross-client boundary nodes "
                                       "kept per round (BNS-GCN's p; 1.0 = Distributed GCN)")

    def validate(self, cfg: Any) -> None:
        if not 0.0 < self.boundary_rate <= 1.0:
            raise ConfigError(f"boundary_rate must be in (0, 1] (got {self.boundary_rate}); "
                              "e.g. --boundary-rate 0.1")
        require_gcn(cfg, "bns-gcn")

