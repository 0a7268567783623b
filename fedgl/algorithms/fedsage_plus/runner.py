"""One seeded FedSage+ repeat (the common FedAvg driver with the FedSage+ client and server)."""

from __future__ import annotations

from typing import Any

from fedgl.algorithms.fedsage_plus.client import FedSagePlusClient
from fedgl.algorithms.fedsage_plus.server import FedSagePlusServer
from fedgl.algorithms.runner import predict_federated, run_federated
from fedgl.results import RepeatResult


def run_repeat(graph: Any, cfg: Any, *, repeat: int, seed: int, progress: Any,
               **kwargs: Any) -> RepeatResult:
    return run_federated(graph, cfg, repeat=repeat, seed=seed, client_cls=FedSagePlusClient,
                         server_cls=FedSagePlusServer, progress=progress, **kwargs)


def predict_repeat(graph: Any, cfg: Any, seed: int, parts: dict) -> tuple:
    """Every client's predictions of a saved FedSage+ model (its set-up, NeighGen's training
    and mending, first: the same seeded steps as in training)."""
    return predict_federated(graph, cfg, seed, parts["global"], FedSagePlusClient,
                             FedSagePlusServer)
