"""Oracle evaluation: the global model scored on the full graph.

This sits *outside* the federation (no client or server holds it) and exists only to report the
"global model" metric, labelled ``oracle_*`` in every result. The papers' own metric is the
federated one computed from the clients' local counts.
"""

from __future__ import annotations

import torch
from torch import Tensor

from fedgl.config import Config
from fedgl.data.client_data import SPLITS
from fedgl.data.graph import GraphData
from fedgl.federation.aggregate import State
from fedgl.models import GCN, build_model, gcn_edge_weights
from fedgl.models.base import load_state, sparse_rows
from fedgl.models.gcn import edges_into


class OracleEvaluator:
    """Scores model weights on the whole graph with the ordinary (centralised) forward pass."""

    def __init__(self, graph: GraphData, config: Config) -> None:
        self.device = torch.device(config.device)
        self.model = build_model(config.model, graph.num_features, config.hidden,
                                 graph.num_classes, config.layers, config.dropout).to(self.device)
        ei, w = gcn_edge_weights(graph.edge_index, graph.num_nodes, graph.degrees() + 1)
        self.x = graph.x.to(self.device)
        if isinstance(self.model, GCN):  # its first use of x is x W^T: sparse features in CSR
            self.x = sparse_rows(self.x)
        self.edge_index, self.edge_weight = ei.to(self.device), w.to(self.device)
        self.y = graph.y.to(self.device)
        self.masks = [getattr(graph, f"{s}_mask").to(self.device) for s in SPLITS]
        # a GCN scores only the nodes of some split: its last layer sums only the edges into
        # them (the same floats for those rows as the whole graph's pass)
        self.scored: tuple[Tensor, tuple[Tensor, Tensor | None]] | None = None
        if isinstance(self.model, GCN):
            rows = torch.stack(self.masks).any(0).nonzero().flatten()
            edges = edges_into(rows, self.edge_index, self.edge_weight, graph.num_nodes)
            if edges is not None:
                self.scored = (rows, edges)

    def _load(self, weights: State) -> None:
        load_state(self.model, {k: v.to(self.device) for k, v in weights.items()})
        self.model.eval()

    @torch.no_grad()
    def logits(self, weights: State) -> torch.Tensor:
        """Log-probabilities of every node."""
        self._load(weights)
        return self.model(self.x, self.edge_index, self.edge_weight)

    @torch.no_grad()
    def __call__(self, weights: State) -> dict[str, float]:
        if self.scored is None:
            hit, masks = self.logits(weights).argmax(-1) == self.y, self.masks
        else:
            rows, edges = self.scored
            self._load(weights)
            out = self.model(self.x, self.edge_index, self.edge_weight, out_rows=rows,
                             out_edges=edges)
            hit, masks = out.argmax(-1) == self.y[rows], [m[rows] for m in self.masks]
        return {f"oracle_{s}_acc": float(hit[m].float().mean()) if m.any() else float("nan")
                for s, m in zip(SPLITS, masks, strict=True)}


def pooled_accuracy(replies: dict[int, dict]) -> dict[str, float]:
    """``<split>_acc`` from the clients' ``correct``/``total`` counts per split, pooled (the
    paper's metric: per-client accuracy weighted by node counts)."""
    out = {}
    for i, split in enumerate(SPLITS):
        correct = sum(r["correct"][i] for r in replies.values())
        total = sum(r["total"][i] for r in replies.values())
        out[f"{split}_acc"] = correct / total if total else float("nan")
    return out
