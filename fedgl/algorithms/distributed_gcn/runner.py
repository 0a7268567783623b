"""One seeded Distributed GCN repeat (the common FedAvg driver with the boundary-exchange server)."""

from __future__ import annotations

from typing import Any

from fedgl.algorithms.boundary.server import BoundaryServer
from fedgl.algorithms.distributed_gcn.client import DistributedGCNClient
from fedgl.algorithms.runner import predict_federated, run_federated
from fedgl.results import RepeatResult


def run_repeat(graph: Any, cfg: Any, *, repeat: int, seed: int, progress: Any,
               **kwargs: Any) -> RepeatResult:
    return run_federated(graph, cfg, repeat=repeat, seed=seed, client_cls=DistributedGCNClient,
                         server_cls=BoundaryServer, progress=progress, **kwargs)


def predict_repeat(graph: Any, cfg: Any, seed: int, parts: dict) -> tuple:
    """Every client's predictions of a saved Distributed GCN model (the boundary exchange
    first)."""
    return predict_federated(graph, cfg, seed, parts["global"], DistributedGCNClient,
                             BoundaryServer, score=BoundaryServer.score)
