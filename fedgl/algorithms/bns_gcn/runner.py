"""One seeded BNS-GCN repeat (the common FedAvg driver with the boundary-exchange server)."""

from __future__ import annotations

from typing import Any

from fedgl.algorithms.bns_gcn.client import BNSGCNClient
from fedgl.algorithms.boundary.server import BoundaryServer
from fedgl.algorithms.runner import predict_federated, run_federated
from fedgl.results import RepeatResult


def run_repeat(graph: Any, cfg: Any, *, repeat: int, seed: int, progress: Any,
               **kwargs: Any) -> RepeatResult:
    return run_federated(graph, cfg, repeat=repeat, seed=seed, client_cls=BNSGCNClient,
                         server_cls=BoundaryServer, progress=progress, **kwargs)


def predict_repeat(graph: Any, cfg: Any, seed: int, parts: dict) -> tuple:
    """Every client's predictions of a saved BNS-GCN model (the boundary exchange first)."""
    return predict_federated(graph, cfg, seed, parts["global"], BNSGCNClient, BoundaryServer,
                             score=BoundaryServer.score)
