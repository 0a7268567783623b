"""FedGCN's entry point: the generic FedAvg driver with FedGCN's client and server."""

from __future__ import annotations

from typing import Any

from fedgl.algorithms.fedgcn.client import FedGCNClient
from fedgl.algorithms.fedgcn.server import FedGCNServer
from fedgl.algorithms.runner import predict_federated, run_federated
from fedgl.config import Config
from fedgl.data.graph import GraphData
from fedgl.results import RepeatResult


def run_fedgcn(graph: GraphData, cfg: Config, **kwargs: Any) -> RepeatResult:
    """One seeded FedGCN repeat (see :func:`fedgl.algorithms.runner.run_federated`)."""
    return run_federated(graph, cfg, client_cls=FedGCNClient, server_cls=FedGCNServer, **kwargs)


def predict_fedgcn(graph: GraphData, cfg: Config, seed: int, parts: dict) -> tuple:
    """Every client's predictions of a saved FedGCN model, after the pre-training exchange
    (:func:`fedgl.algorithms.runner.predict_federated`)."""
    return predict_federated(graph, cfg, seed, parts["global"], FedGCNClient, FedGCNServer)
