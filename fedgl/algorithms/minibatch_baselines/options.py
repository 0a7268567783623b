"""Options of the mini-batch baselines (schedules the paper leaves open are flags here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fedgl.algorithms.minibatch.options import MiniBatchOptions
from fedgl.errors import ConfigError


@dataclass
class FedGNNGOptions(MiniBatchOptions):
    """FedGNN-G: cross-client training on every client in every iteration (Swift, I=1, K=M)."""


@dataclass
class LocalOnlyOptions(MiniBatchOptions):
    """Local-only FedSGD (the paper's "FedSage" row: Swift with K = 0)."""


@dataclass
class LLCGOptions(MiniBatchOptions):
    correction_period: int = field(default=10, metadata={
        "help": "LLCG: a full-neighbour cross-client correction step every this many iterations"})
    correction_clients: int = field(default=0, metadata={
        "help": "LLCG: clients in each correction step (0 = all)"})

    def validate(self, cfg: Any) -> None:
        super().validate(cfg)
        if self.correction_period < 1 or self.correction_clients < 0:
            raise ConfigError("correction_period must be >= 1 and correction_clients >= 0; use "
                              "e.g. --correction-period 10 --correction-clients 0")


@dataclass
class PNSOptions(MiniBatchOptions):
    pns_interval: int = field(default=20, metadata={
        "help": "FedGNN-PNS: first interval between cross-client neighbour samplings"})
    pns_decay: float = field(default=0.8, metadata={
        "help": "FedGNN-PNS: interval j is max(pns_min_interval, round(pns_interval * decay^j))"})
    pns_min_interval: int = field(default=1, metadata={
        "help": "FedGNN-PNS: smallest interval between samplings"})
    pns_fanout: int = field(default=10, metadata={
        "help": "FedGNN-PNS: cross-client neighbours sampled per node and cached (-1 = all)"})

    def validate(self, cfg: Any) -> None:
        super().validate(cfg)
        if self.pns_interval < 1 or self.pns_min_interval < 1 or not 0 < self.pns_decay <= 1:
            raise ConfigError("FedGNN-PNS needs pns_interval >= 1, pns_min_interval >= 1 and "
                              "0 < pns_decay <= 1; e.g. --pns-interval 20 --pns-decay 0.8")
        if self.pns_fanout == 0 or self.pns_fanout < -1:
            raise ConfigError("pns_fanout must be >= 1 or -1 (all); e.g. --pns-fanout 10")
