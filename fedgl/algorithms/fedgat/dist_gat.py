"""DistGAT (FedGAT paper §6): federated GAT with every cross-client edge dropped.

Each client trains an exact GAT on the subgraph induced by its own nodes (own features, own-own
edges, self-loops) and the server averages the models (FedAvg); there is no pre-training round.
The paper notes this equals FedGraphNN-style local-subgraph training (He et al. 2021).
"""

from __future__ import annotations

import torch

from fedgl.algorithms.fedgat.client import GATClient, GATView
from fedgl.algorithms.fedgat.common import run_gat_federated
from fedgl.algorithms.fedgat.server import GATFedAvgServer
from fedgl.models.gat import add_self_loops
from fedgl.results import RepeatResult


class DistGATClient(GATClient):
    """A client that sees only its local subgraph."""

    approximate = False

    def build_view(self) -> GATView:
        d = self.data
        ei = self._local_edges()
        ei = ei[:, d.owns(ei[0])]
        edges = add_self_loops(d.global_to_local(ei.flatten()).view(2, -1), d.num_nodes)
        return GATView(self.x_own, edges, edges, torch.arange(d.num_nodes), d.num_nodes)


def run_distgat(graph, cfg, *, repeat: int, seed: int, progress, **kwargs) -> RepeatResult:
    """One seeded DistGAT repeat."""
    return run_gat_federated(graph, cfg, repeat=repeat, seed=seed, progress=progress,
                             client_cls=DistGATClient, server_cls=GATFedAvgServer,
                             approximate=False, **kwargs)


def predict_distgat(graph, cfg, seed: int, parts: dict) -> tuple:
    """Every client's predictions of a saved DistGAT model (local subgraphs; no exchange)."""
    from fedgl.algorithms.fedgat.common import predict_gat_federated

    return predict_gat_federated(graph, cfg, seed, parts["global"], DistGATClient,
                                 GATFedAvgServer)
