"""FedGCN's two 1-hop variants: the paper's eq. (33) and the paper's released code.

``eq33`` (the literal equation; DESIGN.md §FedGCN): client k receives ``S[i]`` for its own nodes
only (``N d`` values down in all), layer 1 is the linear map of the exact ``(ÂX)_i`` and the later
layers run on the *local* subgraph ``A_k`` (own-own edges, local degrees)::

    Z_i = Σ_{j ∈ Ñ_k(i), j ∈ V_k} (d^k_i d^k_j)^{-1/2} relu((ÂX)_j W1 + b1) W2 + b2

``paper-code`` (what the authors' released code trains: each client holds the subgraph of its
nodes *plus their 1-hop neighbours* and runs a GCN on it): client k receives the rows of
``V_k ∪ N(V_k)`` -- the exact first-layer aggregates ``(ÂX)_j`` of its remote neighbours too --
and the later layers run on the edges it knows (own-own and the cross-client edges into its
nodes), normalised, as the released code's ``GCNConv(normalize=True)`` does, with the degrees of
the graph the client holds::

    Z_i = Σ_{j ∈ Ñ(i)} (d̃_i d̃^k_j)^{-1/2} relu((ÂX)_j W1 + b1) W2 + b2,   i ∈ V_k,
    d̃^k_j = d̃_j (j ∈ V_k: all its edges are known),  1 + |N(j) ∩ V_k| (j remote).

With the true degree ``d̃_j`` in place of ``d̃^k_j`` this is the centralised GCN (our 2-hop), so
the variant differs from 2-hop only in how remote neighbours are weighted in layer 2. The released
code's client also holds the edges among remote neighbours and their raw features; under the
federation boundary a client knows neither, and gets the aggregates from the server instead.

Communication (appendix F, eq. 6 with ``|N^{L-1}_k| = |N(V_k)|``): the remote rows' first-layer
aggregates need their degrees, so the exchange is the 2-hop one -- up ``Σ_i |c(Ñ_i)| d`` values
plus ``N`` degrees, down ``Σ_k |N(V_k)| d`` values plus one degree per remote neighbour -- not the
``N d`` download that appendix F counts for 1-hop.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def exchanges_neighbour_rows(config: Any) -> bool:
    """True when the pre-training round returns the rows of ``V_k ∪ N(V_k)`` with the remote
    neighbours' degrees: 2-hop, and 1-hop in the released code's variant."""
    return config.hops >= 2 or (config.hops == 1 and
                                getattr(config, "one_hop_variant", "eq33") == "paper-code")


def held_subgraph_degrees(edge_index: Tensor, num_rows: int) -> Tensor:
    """``d̃^k``: 1 + in-degree of each row over the edges the client holds (``edge_index`` without
    self-loops, both directions present)."""
    return torch.bincount(edge_index[1], minlength=num_rows) + 1
