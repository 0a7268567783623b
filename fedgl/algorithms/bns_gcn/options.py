"""BNS-GCN's own configuration keys."""

from __future__ import annotations

from dataclasses import dataclass, field

from fedgl.errors import ConfigError


@dataclass
class BNSGCNOptions:
    """Options of ``--algorithm bns-gcn`` (alias ``bds-gcn``)."""

    boundary_rate: float = field(default=0.1, metadata={
        "help": "ρ: fraction of each client's cross-client boundary nodes kept per round "
                "(BNS-GCN's p; 1.0 keeps all = Distributed GCN)"})

    def validate(self, cfg: object = None) -> None:
        if not 0.0 < self.boundary_rate <= 1.0:
            raise ConfigError(f"boundary_rate must be in (0, 1] (got {self.boundary_rate}); "
                              "e.g. --boundary-rate 0.1")
