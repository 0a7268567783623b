"""Swift-FedGNN's server: FedSGD with Adam (or SGD) and the periodic schedule of Algorithm 1 —
every ``period`` iterations ``cross_clients`` uniformly drawn clients train with cross-client
neighbours sampled by the server on the global structure, everyone else locally."""

from __future__ import annotations

from typing import Any

from fedgl.algorithms.minibatch.server import FedSGDServer, PeriodicSchedule
from fedgl.algorithms.minibatch.settings import MiniBatchSettings


def swift_schedule(options: Any, settings: MiniBatchSettings) -> PeriodicSchedule:
    return PeriodicSchedule(int(options.period), int(options.cross_clients),
                            list(settings.num_neighbors), bool(options.cross_at_start))


def deployed_schedule(cfg: Any, settings: MiniBatchSettings) -> tuple[PeriodicSchedule, int]:
    """Swift-FedGNN's schedule for the deployed mini-batch driver (no PNS cache: -1)."""
    return swift_schedule(cfg, settings), -1


SwiftServer = FedSGDServer
