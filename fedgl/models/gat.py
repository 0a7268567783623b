"""Graph attention network (Veličković et al., 2018) on PyG's ``GATConv``, with an optional
polynomial-attention first layer (FedGAT).

Convention (notes/fedgat.md §5.16): hidden layers have ``heads`` heads of ``hidden`` units,
concatenated, then ELU; the output layer has ``output_heads`` heads averaged (1 on Cora and
CiteSeer, 8 on PubMed). Dropout (configurable, the paper uses none) acts between layers only:
input or attention dropout would break FedGAT's pre-computed first-layer matrices.

Self-loops are expected in ``edge_index`` (every layer is built with ``add_self_loops=False``),
because in the federation the graph a layer runs on comes from the protocol.

The forward pass is split so that federated clients can supply the first layer themselves:
``forward = upper(first_layer(x, edge_index), edge_index)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GATConv

from fedgl.models.base import dropout
from fedgl.models.poly_attention import PolyAttention, PolyGATConv


class GAT(nn.Module):
    """L-layer multi-head GAT; layer 1 is a :class:`PolyGATConv` when ``attention`` is given."""

    def __init__(self, in_channels: int, hidden: int, out_channels: int, layers: int = 2,
                 heads: int = 8, output_heads: int = 1, dropout: float = 0.0,
                 attention: PolyAttention | None = None, basis: str = "power",
                 cap: bool = True) -> None:
        super().__init__()
        convs = []
        dim = in_channels
        for i in range(layers):
            last = i == layers - 1
            h, out = (output_heads, out_channels) if last else (heads, hidden)
            if i == 0 and attention is not None:
                conv: GATConv = PolyGATConv(dim, out, h, concat=not last, attention=attention,
                                            basis=basis, cap=cap)
            else:
                conv = GATConv(dim, out, heads=h, concat=not last, add_self_loops=False)
            convs.append(conv)
            dim = h * out
        self.convs = nn.ModuleList(convs)
        self.dropout = dropout

    @property
    def first(self) -> GATConv:
        return self.convs[0]

    def first_layer(self, x: Tensor, edge_index: Tensor) -> Tensor:
        """Layer 1 before its activation."""
        return self.convs[0](x, edge_index)

    def upper(self, h: Tensor, edge_index: Tensor, *, generator: torch.Generator | None = None,
              out_rows: Tensor | None = None) -> Tensor:
        """Layers 2..L on layer 1's (pre-activation) output; log-probabilities."""
        for conv in self.convs[1:]:
            h = dropout(F.elu(h), self.dropout, self.training, generator)
            h = conv(h, edge_index)
        if out_rows is not None:
            h = h[out_rows]
        return torch.log_softmax(h, dim=-1)

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None, *,
                generator: torch.Generator | None = None, out_rows: Tensor | None = None
                ) -> Tensor:
        """Log-probabilities; ``edge_weight`` is ignored (attention weighs the edges)."""
        return self.upper(self.first_layer(x, edge_index), edge_index, generator=generator,
                          out_rows=out_rows)


def add_self_loops(edge_index: Tensor, num_nodes: int) -> Tensor:
    """Append one self-loop per node to an edge list that has none."""
    loops = torch.arange(num_nodes, device=edge_index.device)
    return torch.cat([edge_index, torch.stack([loops, loops])], dim=1)
