"""What the deployed server needs, beyond FedGCN's, to run the other horizontal algorithms.

A deployed server knows only the shards' public facts (each client's node count, the feature and
class widths); everything else comes through protocol messages. The algorithms below need
nothing more:

- **FedAvg** is ``fedgcn`` with ``hops: 0`` (no pre-training exchange); it runs deployed as
  FedGCN does.
- **FedGAT** and its baseline **DistGAT**: the FedAvg driver with the GAT's initial weights
  (from the widths and the seed) and the run's seed for the degree cap. FedGAT's pre-training
  exchange is messages only: the clients upload their nodes' features and incident edges, the
  server sends each client the rows (``fast``) or matrices (``protocol``) its layers need.
- **The mini-batch baselines** of Swift-FedGNN (FedGNN-G, local-only, LLCG, FedGNN-PNS): the
  mini-batch FedSGD server with their schedule, built from the configuration alone
  (:func:`minibatch_schedule`); the graph's node count is the sum of the shards' sizes.
- **FedSage+**: the FedAvg driver with FedSage+'s server, which relays the generators'
  parameters, latents and gradients between the clients (messages only).

The algorithms left simulation-only, and why, are :data:`fedgl.deployment.party.SIMULATION_ONLY`.
"""

from __future__ import annotations

from typing import Any

from fedgl.algorithms.fedgat.common import gat_initial_weights
from fedgl.algorithms.fedgat.server import FedGATServer, GATFedAvgServer
from fedgl.algorithms.minibatch.server import Schedule
from fedgl.algorithms.minibatch.settings import MiniBatchSettings
from fedgl.config import Config
from fedgl.federation.aggregate import FedAvg, State


class _DeployedGAT:
    """A GAT server as the deployed FedAvg driver builds one: the driver's constructor
    signature, the GAT's initial weights (:meth:`deployed_initial_weights`) and the run's seed
    (a deployed run is one repeat, whose seed is ``config.seed``)."""

    pretrain_stats: dict

    def __init__(self, runtime: Any, strategy: FedAvg, init_weights: State,
                 config: Config) -> None:
        super().__init__(runtime, strategy, init_weights, config,  # type: ignore[call-arg]
                         seed=int(config.seed))

    @staticmethod
    def deployed_initial_weights(num_features: int, num_classes: int, cfg: Config,
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


def minibatch_schedule(cfg: Config, settings: MiniBatchSettings) -> tuple[Schedule, int]:
    """The FedSGD schedule of a mini-batch algorithm (Swift-FedGNN or one of its baselines)
    and its FedGNN-PNS cache fan-out (-1: no cache), from the configuration alone."""
    if cfg.algorithm == "swift-fedgnn":
        from fedgl.algorithms.swift_fedgnn.server import swift_schedule

        return swift_schedule(cfg, settings), -1
    from fedgl.algorithms.minibatch_baselines.runner import baseline_schedule

    return baseline_schedule(cfg.algorithm, cfg, settings)
