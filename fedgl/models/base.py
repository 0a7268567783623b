"""Shared pieces of fedgl's GNN models."""

from __future__ import annotations

import torch
from torch import Tensor, nn


def dropout(x: Tensor, p: float, training: bool, generator: torch.Generator | None) -> Tensor:
    """Inverted dropout drawing its mask from ``generator``, so that a client's randomness is its
    own and identical in every runtime (the global torch RNG is shared by in-process clients)."""
    if not training or p == 0.0:
        return x
    keep = torch.rand(x.shape, generator=generator, device=x.device) >= p
    return x * keep / (1.0 - p)


def scatter_sum(src: Tensor, index: Tensor, dim_size: int) -> Tensor:
    """``out[index[e]] += src[e]`` over the first dimension, ``dim_size`` rows: the same
    ``scatter_add_`` that PyG's ``scatter(..., reduce="sum")`` runs, so results are identical
    bit for bit, without importing PyG (whose import is most of a run's start-up)."""
    expanded = index.view((-1,) + (1,) * (src.dim() - 1)).expand_as(src)
    return src.new_zeros((dim_size,) + tuple(src.shape[1:])).scatter_add_(0, expanded, src)


class RootSeparateStack(nn.Module):
    """A stack of PyG convolutions that keep the root term themselves (SAGE, GIN): self-loops in
    ``edge_index`` are dropped, ReLU and dropout between layers, log-softmax output.
    Subclasses set ``self.convs`` (an ``nn.ModuleList``) and ``self.dropout``."""

    convs: nn.ModuleList
    dropout: float

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None, *,
                generator: torch.Generator | None = None, out_rows: Tensor | None = None
                ) -> Tensor:
        """Log-probabilities; ``edge_weight`` is ignored."""
        ei = edge_index[:, edge_index[0] != edge_index[1]]
        h = x
        for i, conv in enumerate(self.convs):
            h = conv(h, ei)
            if i < len(self.convs) - 1:
                h = dropout(torch.relu(h), self.dropout, self.training, generator)
        if out_rows is not None:
            h = h[out_rows]
        return torch.log_softmax(h, dim=-1)
