"""FedGCN client (Yao et al., "FedGCN: Convergence-Communication Tradeoffs in Federated Training
of Graph Convolutional Networks", Algorithm 1 and DESIGN.md §FedGCN).

Pre-training (L ∈ {1, 2}): the client sends, for every node i with a neighbour or itself in its
own set V_k, the partial sum ``S_k[i] = Σ_{j ∈ V_k ∩ Ñ(i)} d̃_j^{-1/2} x_j`` (only rows it touches,
never a raw remote feature), and receives the full sums ``S[i] = Σ_k S_k[i]`` for its own nodes
(1-hop) or for V_k ∪ N(V_k) with those nodes' degrees (2-hop). Layer 1 then sees
``(ÂX)_i = d̃_i^{-1/2} S[i]`` exactly; further layers run on the received subgraph (the edges the
client knows: those incident to its own nodes), normalised with the true degrees.

0-hop is FedAvg on the local subgraph: raw own features, own-own edges, local degrees.
"""

from __future__ import annotations

import torch
from torch import Tensor

from fedgl.algorithms.base import GNNClient, ModelInputs
from fedgl.config import Config
from fedgl.data.client_data import ClientData
from fedgl.models import gcn_edge_weights


class FedGCNClient(GNNClient):
    """A FedGCN party. Holds only its :class:`ClientData` and, after pre-training, the sums it
    received (rows for its own nodes, and with 2-hop for its remote neighbours)."""

    def __init__(self, data: ClientData, config: Config, seed: int) -> None:
        super().__init__(data, config, seed)
        self.hops = config.hops
        self.deg_tilde = data.degrees() + 1  # true degrees + self-loop, of own nodes
        self.received_sums: Tensor | None = None
        self.remote_deg_tilde: Tensor | None = None

    # ------------------------------------------------------------------ pre-training round
    def _touched(self) -> Tensor:
        """Global ids of rows this client contributes to: own nodes first, then remote neighbours."""
        return torch.cat([self.data.node_ids, self.data.remote_neighbors()])

    def partial_sums(self) -> dict:
        """Step 1 of the pre-training round: ``S_k[i]`` for every touched node i.

        Message: ``ids`` (touched rows, own first), ``sums`` (one row of d values each),
        ``num_requested`` (how many leading rows it wants back: own nodes for 1-hop, all touched
        rows for 2-hop) and, for 2-hop, ``degrees`` of its own nodes (aligned with the first ids).
        """
        d = self.data
        touched = self._touched()
        n_own = d.num_nodes
        scaled = d.x * self.deg_tilde.to(d.x.dtype).pow(-0.5).unsqueeze(1)
        sums = torch.zeros(len(touched), d.num_features, dtype=d.x.dtype)
        sums[:n_own] = scaled  # self-loop term of own nodes
        # Column (j -> i) with i owned: own node i contributes its scaled features to row j.
        j, i = d.edge_index
        sums.index_add_(0, self._row_of(j, touched), scaled[d.global_to_local(i)])
        msg = {"ids": touched, "sums": sums,
               "num_requested": n_own if self.hops == 1 else len(touched)}
        if self.hops >= 2:
            msg["degrees"] = self.deg_tilde.clone()
        return msg

    def _row_of(self, ids: Tensor, touched: Tensor) -> Tensor:
        """Row of each id in ``touched`` (own nodes sorted, then remote neighbours sorted)."""
        n_own = self.data.num_nodes
        remote = touched[n_own:]
        own = self.data.owns(ids)
        rows = torch.empty_like(ids)
        rows[own] = self.data.global_to_local(ids[own])
        rows[~own] = n_own + torch.searchsorted(remote, ids[~own])
        return rows

    def receive_sums(self, sums: Tensor, degrees: Tensor | None = None) -> None:
        """Step 3: the server's full sums for the requested rows (and remote degrees, 2-hop)."""
        self.received_sums = sums
        self.remote_deg_tilde = degrees
        self._inputs = self._train_cache = None

    # ------------------------------------------------------------------ model inputs
    def model_inputs(self) -> ModelInputs:
        d = self.data
        n_own = d.num_nodes
        if self.hops == 0:
            return self._local_subgraph_inputs(d.x, pre_aggregated=False)
        if self.received_sums is None:
            raise RuntimeError("FedGCN client with hops >= 1 used before the pre-training round")
        if self.hops == 1:
            # Eq. (33): layer 1 on the received (ÂX) rows, later layers on the local graph A_k.
            agg = self.received_sums * self.deg_tilde.to(d.x.dtype).pow(-0.5).unsqueeze(1)
            return self._local_subgraph_inputs(agg, pre_aggregated=True)
        # Eq. (34): rows V_k ∪ N(V_k); later layers on the known edges with the true degrees.
        row_ids = self._touched()
        deg = torch.cat([self.deg_tilde, self.remote_deg_tilde])
        agg = self.received_sums * deg.to(self.received_sums.dtype).pow(-0.5).unsqueeze(1)
        # Known edges among the rows (both directions), without duplicates.
        j, i = d.edge_index
        src = torch.cat([j, i])
        dst = torch.cat([i, j])
        keep = _isin_sorted_rows(src, row_ids, n_own) & _isin_sorted_rows(dst, row_ids, n_own)
        rows = self._row_of(src[keep], row_ids), self._row_of(dst[keep], row_ids)
        key = torch.unique(rows[1] * len(row_ids) + rows[0])
        ei = torch.stack([key % len(row_ids), key // len(row_ids)])
        ei, w = gcn_edge_weights(ei, len(row_ids), deg)
        return ModelInputs(agg, ei, w, torch.arange(n_own), pre_aggregated=True)

    def _local_subgraph_inputs(self, x: Tensor, *, pre_aggregated: bool) -> ModelInputs:
        """Rows = own nodes; edges = own-own edges normalised with local degrees (graph A_k)."""
        d = self.data
        j, i = d.edge_index
        own_src = d.owns(j)
        ei = torch.stack([d.global_to_local(j[own_src]), d.global_to_local(i[own_src])])
        local_deg = torch.bincount(ei[1], minlength=d.num_nodes) + 1
        ei, w = gcn_edge_weights(ei, d.num_nodes, local_deg)
        return ModelInputs(x, ei, w, torch.arange(d.num_nodes), pre_aggregated=pre_aggregated)


def _isin_sorted_rows(ids: Tensor, row_ids: Tensor, n_own: int) -> Tensor:
    """Membership of ids in ``row_ids`` = sorted own ids ++ sorted remote ids."""
    out = torch.zeros_like(ids, dtype=torch.bool)
    for part in (row_ids[:n_own], row_ids[n_own:]):
        if part.numel():
            pos = torch.searchsorted(part, ids).clamp(max=part.numel() - 1)
            out |= part[pos] == ids
    return out
