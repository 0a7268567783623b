"""FedGAT and DistGAT's servers as the generic deployed FedAvg driver builds them
(``AlgorithmSpec.driver = "fedavg"``): the driver's constructor signature
``(runtime, strategy, init_weights, config)``, the GAT's seeded initial weights from the widths
the clients reported (:meth:`_DeployedGAT.initial_weights`), and the run's seed for the
degree cap (a deployed run is one repeat, whose seed is ``config.seed``)."""

from __future__ import annotations

from typing import Any

from fedgl.algorithms.fedgat.common import gat_initial_weights
from fedgl.algorithms.fedgat.server import FedGATServer, GATFedAvgServer
from fedgl.config import Config
from fedgl.federation.aggregate import FedAvg, State


class _DeployedGAT:
    """A GAT server with the deployed FedAvg driver's constructor (see the module docstring)."""

    pretrain_stats: dict

    def __init__(self, runtime: Any, strategy: FedAvg, init_weights: State,
                 config: Config) -> None:
        super().__init__(runtime, strategy, init_weights, config,  # type: ignore[call-arg]
                         seed=int(config.seed))

    @staticmethod
    def initial_weights(num_features: int, num_classes: int, cfg: Config,
                                 seed: int) -> State:
        """The GAT's seeded initial model, from the widths the clients reported."""
        return gat_initial_weights(cfg, num_features, num_classes, seed)

    def result_extra(self) -> dict[str, Any]:
        """What the local GAT driver records beside the history (FedGAT's pre-training
        figures)."""
        return {"fedgat": self.pretrain_stats} if self.pretrain_stats else {}


class DeployedFedGATServer(_DeployedGAT, FedGATServer):
    """FedGAT's server (pre-training exchange, then FedAvg) in a deployed run."""


class DeployedDistGATServer(_DeployedGAT, GATFedAvgServer):
    """DistGAT's server (FedAvg of exact GATs on the clients' own subgraphs) deployed."""
