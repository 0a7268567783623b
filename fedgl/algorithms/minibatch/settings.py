"""The plain values a mini-batch client and server need, read from a config object."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedgl.errors import ConfigError


def parse_fanouts(text: str | int | list[int] | None, layers: int) -> list[int]:
    """``"15,10"`` -> ``[15, 10]``; one number applies to every layer; ``""`` or None = all
    neighbours (``-1``). Input-most layer first (see :mod:`fedgl.data.sampling`).

    # replace with fedgl.config.parse_fanouts when it lands
    """
    if text is None or text == "" or text == []:
        return [-1] * layers
    if isinstance(text, int):
        return [int(text)] * layers
    if isinstance(text, list | tuple):
        values = [int(v) for v in text]
    else:
        try:
            values = [int(v) for v in str(text).replace(" ", "").split(",") if v != ""]
        except ValueError:
            raise ConfigError(f"fanouts {text!r} is not a comma-separated list of integers; "
                              "write e.g. --fanouts 15,10") from None
    if len(values) == 1:
        values = values * layers
    if len(values) != layers:
        raise ConfigError(f"fanouts {text!r} has {len(values)} entries for a {layers}-layer "
                          "model; give one per layer or a single number")
    if any(v == 0 or v < -1 for v in values):
        raise ConfigError(f"fanouts {text!r}: each entry must be >= 1 or -1 (all neighbours)")
    return values


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

    @classmethod
    def from_config(cls, cfg: Any) -> MiniBatchSettings:
        if isinstance(cfg, MiniBatchSettings):
            return cfg
        layers = int(cfg.layers)
        fan = getattr(cfg, "fanouts", "")
        return cls(model=cfg.model, hidden=int(cfg.hidden), layers=layers,
                   dropout=float(cfg.dropout), batch_size=int(getattr(cfg, "batch_size", 0)),
                   fanouts=tuple(parse_fanouts(fan, layers)), lr=float(cfg.lr),
                   weight_decay=float(cfg.weight_decay), device=getattr(cfg, "device", "cpu"))
