"""Algorithm registry: config name -> function running one seeded repeat."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from fedgl.algorithms.baselines.centralized import run_centralized
from fedgl.algorithms.baselines.centralized_gat import run_centralized_gat
from fedgl.algorithms.baselines.dist_gat import run_distgat
from fedgl.algorithms.fedgat import FedGATClient, FedGATServer, run_gat_federated
from fedgl.algorithms.fedgcn import FedGCNClient, FedGCNServer
from fedgl.algorithms.runner import run_federated
from fedgl.results import RepeatResult

RepeatFn = Callable[..., RepeatResult]

REGISTRY: dict[str, RepeatFn] = {
    "fedgcn": partial(run_federated, client_cls=FedGCNClient, server_cls=FedGCNServer),
    "centralized": run_centralized,
    "fedgat": partial(run_gat_federated, client_cls=FedGATClient, server_cls=FedGATServer,
                      approximate=True),
    "distgat": run_distgat,
    "centralized-gat": run_centralized_gat,
}
