"""Shared pieces of fedgl's GNN models."""

from __future__ import annotations

import torch
from torch import Tensor


def dropout(x: Tensor, p: float, training: bool, generator: torch.Generator | None) -> Tensor:
    """Inverted dropout drawing its mask from ``generator``, so that a client's randomness is its
    own and identical in every runtime (the global torch RNG is shared by in-process clients)."""
    if not training or p == 0.0:
        return x
    keep = torch.rand(x.shape, generator=generator, device=x.device) >= p
    return x * keep / (1.0 - p)
