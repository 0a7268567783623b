"""Configuration checks shared by the boundary-exchange baselines (import-light)."""

from __future__ import annotations

from typing import Any

from fedgl.errors import ConfigError


def require_gcn(cfg: Any, name: str) -> None:
    """The boundary-exchange baselines train a GCN."""
    if cfg.model != "gcn":
        raise ConfigError(f"{name} trains a GCN (got --model {cfg.model}); use --model gcn")
