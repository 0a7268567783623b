"""One client's copy of the split GNN (GLASU §3.1): its sub-layers and, if it holds labels, its
classifier. The server has no parameters.

Client sub-layer ``l`` on a sampled block ``Â_m[l]`` (sparse ``|S[l+1]| × |S[l]|``):

- ``gcn``:   ``H⁺ = ReLU(Â H W + b)``
- ``gat``:   ``H⁺ = ReLU(Σ_j α_ij z_j + b)``, ``z = H W``, ``α_ij = softmax_j LeakyReLU(a·z_i + a'·z_j)``
  over the block's edges (one head)
- ``gcnii``: ``H⁺ = ReLU(((1-α) Â H + α H₀) ((1-β_l) I + β_l W))`` (computed as written: one
  sparse ``addmm`` and one product with the combined weight), ``β_l = log(λ/(l+1) + 1)``,
  ``H₀ = ReLU(X_m W_in + b_in)`` the client's own input projection (notes A7)

Widths: every ``H[l]`` for ``l ≥ 1`` is ``hidden`` wide. With ``concat`` aggregation a client's
sub-layer at an aggregation layer outputs only its share of the columns (``hidden/M``), and the
server concatenates the shares. The classifier is ``Linear(hidden, classes)``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from fedgl.algorithms.glasu.blocks import Block
from fedgl.algorithms.glasu.options import GlasuParams


def linear(h: Tensor, lin: nn.Linear, bias: bool = True) -> Tensor:
    """``h Wᵀ (+ b)`` for dense or sparse (COO) ``h``."""
    if h.is_sparse:
        out = torch.sparse.mm(h, lin.weight.t())
        return out + lin.bias if bias and lin.bias is not None else out
    return nn.functional.linear(h, lin.weight, lin.bias if bias else None)


class GATLayer(nn.Module):
    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.lin = nn.Linear(d_in, d_out, bias=False)
        self.att_dst = nn.Parameter(torch.empty(d_out))
        self.att_src = nn.Parameter(torch.empty(d_out))
        self.bias = nn.Parameter(torch.zeros(d_out))
        bound = 1.0 / math.sqrt(d_out)
        nn.init.uniform_(self.att_dst, -bound, bound)
        nn.init.uniform_(self.att_src, -bound, bound)

    def forward(self, h: Tensor, block: Block) -> Tensor:
        z = linear(h, self.lin)
        r, c = block.edges
        e = torch.nn.functional.leaky_relu(z[block.dst_in_src[r]] @ self.att_dst
                                           + z[c] @ self.att_src, 0.2)
        n = block.dst.numel()
        emax = torch.full((n,), -torch.inf, dtype=e.dtype).scatter_reduce(0, r, e, "amax")
        w = torch.exp(e - emax[r])
        denom = torch.zeros(n, dtype=e.dtype).index_add(0, r, w)
        alpha = w / denom[r]
        out = torch.zeros(n, z.size(1), dtype=z.dtype).index_add(0, r, alpha[:, None] * z[c])
        return out + self.bias


class ClientStack(nn.Module):
    """Client ``client``'s sub-layers (and classifier when ``classifier``)."""

    def __init__(self, p: GlasuParams, client: int, in_dim: int, classifier: bool) -> None:
        super().__init__()
        self.p = p
        a, b = p.share(client)
        self.share_width = b - a
        self.input = nn.Linear(in_dim, p.hidden) if p.backbone == "gcnii" else None
        self.convs = nn.ModuleList()
        for layer in range(p.layers):
            d_in = in_dim if layer == 0 and p.backbone != "gcnii" else p.hidden
            d_out = self.share_width if layer in p.agg and p.aggregate == "concat" else p.hidden
            if p.backbone == "gcn":
                self.convs.append(nn.Linear(d_in, d_out))
            elif p.backbone == "gat":
                self.convs.append(GATLayer(d_in, d_out))
            else:
                self.convs.append(nn.Linear(p.hidden, p.hidden, bias=False))
        self.classifier = nn.Linear(p.hidden, p.num_classes) if classifier else None

    def first_input(self, x: Tensor) -> Tensor:
        """``H_m[0]``: raw columns, or GCNII's projection ``ReLU(X W_in + b)``."""
        return torch.relu(linear(x, self.input)) if self.input is not None else x

    def layer(self, layer: int, h: Tensor, block: Block, h0: Tensor | None) -> Tensor:
        """``H⁺_m[l]`` from ``H_m[l]`` (rows ``block.src``) onto ``block.dst``."""
        conv = self.convs[layer]
        if self.p.backbone == "gcn":
            w = conv.weight.t()  # Â H W + b, multiplying in the cheaper order
            z = (torch.sparse.mm(block.adj, linear(h, conv, bias=False))
                 if h.is_sparse or h.size(1) > w.size(1) else torch.sparse.mm(block.adj, h) @ w)
            return torch.relu(z + conv.bias)
        if self.p.backbone == "gat":
            return torch.relu(conv(h, block))
        support = torch.sparse.addmm(h0, block.adj, h, beta=self.p.gcnii_alpha,
                                     alpha=1 - self.p.gcnii_alpha)  # (1-α) Â H + α H₀
        return torch.relu(support @ self.gcnii_weight(layer))

    def gcnii_weight(self, layer: int) -> Tensor:
        """GCNII's identity-mapped weight ``(1-β_l) I + β_l W_l`` (one product instead of
        ``(1-β) S + β S W``)."""
        beta = math.log(self.p.gcnii_lambda / (layer + 1) + 1.0)
        w = self.convs[layer].weight.t()
        return (1 - beta) * torch.eye(w.size(0), dtype=w.dtype) + beta * w
