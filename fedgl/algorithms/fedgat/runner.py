"""FedGAT's entry point: the GAT FedAvg driver with FedGAT's client and server."""

from __future__ import annotations

from typing import Any

from fedgl.algorithms.fedgat.client import FedGATClient
from fedgl.algorithms.fedgat.common import run_gat_federated
from fedgl.algorithms.fedgat.server import FedGATServer
from fedgl.config import Config
from fedgl.data.graph import GraphData
from fedgl.results import RepeatResult


def run_fedgat(graph: GraphData, cfg: Config, **kwargs: Any) -> RepeatResult:
    """One seeded FedGAT repeat (see :func:`run_gat_federated`)."""
    return run_gat_federated(graph, cfg, client_cls=FedGATClient, server_cls=FedGATServer,
                             approximate=True, **kwargs)


def predict_fedgat(graph: GraphData, cfg: Config, seed: int, parts: dict) -> tuple:
    """Every client's predictions of a saved FedGAT model, after the obfuscated-matrix exchange."""
    from fedgl.algorithms.fedgat.common import predict_gat_federated

    return predict_gat_federated(graph, cfg, seed, parts["global"], FedGATClient, FedGATServer)
