"""Shared pieces of fedgl's GNN models."""

from __future__ import annotations

import warnings

import torch
from torch import Tensor, nn

#: input density (non-zero share) at or below which an evaluation's first product ``x W^T`` runs
#: on a CSR copy of ``x``: Cora's raw features (1.3 % non-zero) 9 times faster than dense, its
#: 2-hop FedGCN inputs (5–6 %) about 4 times (docs/performance.md, "The CPU run")
SPARSE_INPUT_DENSITY = 0.1


def dropout(x: Tensor, p: float, training: bool, generator: torch.Generator | None) -> Tensor:
    """Inverted dropout drawing its mask from ``generator``, so that a client's randomness is its
    own and identical in every runtime (the global torch RNG is shared by in-process clients)."""
    if not training or p == 0.0:
        return x
    return x * keep_mask(x, p, generator) / (1.0 - p)


def keep_mask(x: Tensor, p: float, generator: torch.Generator | None) -> Tensor:
    """The entries :func:`dropout` keeps (boolean, ``x``'s shape), drawn from ``generator``."""
    return torch.rand(x.shape, generator=generator, device=x.device) >= p


def scatter_sum(src: Tensor, index: Tensor, dim_size: int) -> Tensor:
    """``out[index[e]] += src[e]`` over the first dimension, ``dim_size`` rows: the same
    ``scatter_add_`` that PyG's ``scatter(..., reduce="sum")`` runs, so results are identical
    bit for bit, without importing PyG (whose import is most of a run's start-up)."""
    expanded = index.view((-1,) + (1,) * (src.dim() - 1)).expand_as(src)
    return src.new_zeros((dim_size,) + tuple(src.shape[1:])).scatter_add_(0, expanded, src)


def sparse_rows(x: Tensor, max_density: float = SPARSE_INPUT_DENSITY) -> Tensor:
    """``x`` as a CSR tensor when it is a 2-D float tensor on the CPU with at most
    ``max_density`` of its entries non-zero, else ``x`` itself. Only for inputs whose one use is
    a linear map without gradient to ``x`` (``F.linear`` accepts CSR and costs its non-zeros);
    the products equal the dense ones up to float summation order. Training stays dense: its
    per-client inputs are small, and there the sparse kernels' fixed cost was slower (measured
    in docs/performance.md)."""
    if x.dim() != 2 or x.layout != torch.strided or not x.is_floating_point() \
            or x.device.type != "cpu" or x.numel() == 0:
        return x
    if int(torch.count_nonzero(x)) > max_density * x.numel():
        return x
    with warnings.catch_warnings():  # torch calls its CSR support "beta" on every conversion
        warnings.simplefilter("ignore", UserWarning)
        return x.to_sparse_csr()


def load_state(model: nn.Module, state: dict[str, Tensor]) -> None:
    """``model.load_state_dict(state)`` (strict): when ``state`` names exactly the model's
    tensors with their shapes, its values are copied into them directly (what
    ``load_state_dict`` does after its checks, at a fifth of its cost: every in-process client
    loads a model twice a round); anything else goes to ``load_state_dict``, which raises its
    usual error."""
    own = model.state_dict(keep_vars=True)
    if own.keys() != state.keys() or not all(
            isinstance(v, Tensor) and v.shape == own[k].shape for k, v in state.items()):
        model.load_state_dict(state)
        return
    with torch.no_grad():
        for k, v in state.items():
            own[k].copy_(v)


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
