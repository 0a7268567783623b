"""The plain values a mini-batch client and server need, read from a config object."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedgl.config import parse_num_neighbors


@dataclass
class MiniBatchSettings:
    """Model and training values of a mini-batch run (every party gets the same)."""

    model: str = "sage"
    hidden: int = 256
    layers: int = 2
    dropout: float = 0.0
    batch_size: int = 256
    num_neighbors: tuple[int, ...] = (10, 15)     # per hop, first layer first (PyG's order)
    lr: float = 1e-3
    weight_decay: float = 5e-4
    device: str = "cpu"
    eval_num_neighbors: tuple[int, ...] = ()
    eval_max_nodes: int = 0

    @classmethod
    def from_config(cls, cfg: Any) -> MiniBatchSettings:
        if isinstance(cfg, MiniBatchSettings):
            return cfg
        layers = int(cfg.layers)
        fan = getattr(cfg, "num_neighbors", "")
        eval_fan = str(getattr(cfg, "eval_num_neighbors", "") or "")
        return cls(model=cfg.model, hidden=int(cfg.hidden), layers=layers,
                   dropout=float(cfg.dropout), batch_size=int(getattr(cfg, "batch_size", 0)),
                   num_neighbors=tuple(parse_num_neighbors(fan, layers)), lr=float(cfg.lr),
                   weight_decay=float(cfg.weight_decay), device=getattr(cfg, "device", "cpu"),
                   eval_num_neighbors=(tuple(parse_num_neighbors(eval_fan, layers, "eval_num_neighbors"))
                                       if eval_fan else ()),
                   eval_max_nodes=int(getattr(cfg, "eval_max_nodes", 0) or 0))
