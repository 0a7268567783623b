"""Swift-FedGNN's own options (common keys: model, hidden, layers, batch_size, num_neighbors, lr,
weight_decay, rounds = the number of iterations T)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedgl.algorithms.minibatch.options import MiniBatchOptions
from fedgl.config.fields import option
from fedgl.errors import ConfigError


@dataclass(frozen=True)
class SwiftOptions(MiniBatchOptions):
    period: int = option(10, "correction frequency I: cross-client training every I iterations")
    cross_clients: int = option(
        5, "K: clients drawn uniformly for each cross-client iteration (0: local only)")
    cross_at_start: bool = option(
        True, "cross-client training at t = 0 as in Algorithm 1 (false: first at t = I)")

    def validate(self, cfg: Any) -> None:
        super().validate(cfg)
        if self.period < 1:
            raise ConfigError(f"period must be >= 1 (got {self.period}); use e.g. --period 10")
        if self.cross_clients < 0:
            raise ConfigError(f"cross_clients must be >= 0 (got {self.cross_clients})")
        clients = getattr(cfg, "clients", None)
        if clients is not None and self.cross_clients > clients:
            raise ConfigError(f"cross_clients ({self.cross_clients}) exceeds clients ({clients}); "
                              f"use --cross-clients {clients} or fewer")
