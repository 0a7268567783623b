"""Options of the mini-batch baselines (schedules the paper leaves open are flags here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedgl.algorithms.minibatch.options import MiniBatchOptions
from fedgl.config.fields import option
from fedgl.errors import ConfigError


@dataclass(frozen=True)
class FedGNNGOptions(MiniBatchOptions):
    """FedGNN-G: cross-client training on every client in every iteration (Swift, I=1, K=M)."""


@dataclass(frozen=True)
class LocalOnlyOptions(MiniBatchOptions):
    """Local-only FedSGD (the paper's "FedSage" row: Swift with K = 0)."""


@dataclass(frozen=True)
class LLCGOptions(MiniBatchOptions):
    correction_period: int = option(
        10, "LLCG: a full-neighbour cross-client correction step every this many iterations")
    correction_clients: int = option(0, "LLCG: clients in each correction step (0: all)")

    def validate(self, cfg: Any) -> None:
        super().validate(cfg)
        if self.correction_period < 1 or self.correction_clients < 0:
            raise ConfigError("correction_period must be >= 1 and correction_clients >= 0; use "
                              "e.g. --correction-period 10 --correction-clients 0")


@dataclass(frozen=True)
class PNSOptions(MiniBatchOptions):
    pns_interval: int = option(20, "FedGNN-PNS: first interval between neighbour samplings")
    pns_decay: float = option(
        0.8, "FedGNN-PNS: interval j is max(pns_min_interval, round(pns_interval * decay^j))")
    pns_min_interval: int = option(1, "FedGNN-PNS: smallest interval between samplings")
    pns_fanout: int = option(
        10, "FedGNN-PNS: cross-client neighbours sampled and cached per node (-1: all)")

    def validate(self, cfg: Any) -> None:
        super().validate(cfg)
        if self.pns_interval < 1 or self.pns_min_interval < 1 or not 0 < self.pns_decay <= 1:
            raise ConfigError("FedGNN-PNS needs pns_interval >= 1, pns_min_interval >= 1 and "
                              "0 < pns_decay <= 1; e.g. --pns-interval 20 --pns-decay 0.8")
        if self.pns_fanout == 0 or self.pns_fanout < -1:
            raise ConfigError("pns_fanout must be >= 1 or -1 (all); e.g. --pns-fanout 10")
