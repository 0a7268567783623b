"""The plain values a mini-batch client and server need, read from a config object."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedgl.config import parse_fanouts


@dataclass
class MiniBatchSettings:
    """Model and training values of a mini-batch run (every party gets the same)."""

    model: str = "sage"
    hidden: int = 256
    layers: int = 2
    dropout: float = 0.0
    batch_size: int = 256
    fanouts: tuple[int, ...] = (15, 10)
    lr: float = 1e-3
    weight_decay: float = 5e-4
    device: str = "cpu"
    eval_fanouts: tuple[int, ...] = ()
    eval_max_nodes: int = 0

    @classmethod
    def from_config(cls, cfg: Any) -> MiniBatchSettings:
        if isinstance(cfg, MiniBatchSettings):
            return cfg
        layers = int(cfg.layers)
        fan = getattr(cfg, "fanouts", "")
        eval_fan = str(getattr(cfg, "eval_fanouts", "") or "")
        return cls(model=cfg.model, hidden=int(cfg.hidden), layers=layers,
                   dropout=float(cfg.dropout), batch_size=int(getattr(cfg, "batch_size", 0)),
                   fanouts=tuple(parse_fanouts(fan, layers)), lr=float(cfg.lr),
                   weight_decay=float(cfg.weight_decay), device=getattr(cfg, "device", "cpu"),
                   eval_fanouts=tuple(parse_fanouts(eval_fan, layers)) if eval_fan else (),
                   eval_max_nodes=int(getattr(cfg, "eval_max_nodes", 0) or 0))
