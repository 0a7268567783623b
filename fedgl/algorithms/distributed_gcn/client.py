"""The Distributed GCN client: the shared boundary exchange with every boundary node (ρ = 1)."""

from __future__ import annotations

from fedgl.algorithms.boundary.client import BoundaryClient
from fedgl.config import Config
from fedgl.data.client_data import ClientData


class DistributedGCNClient(BoundaryClient):
    """Receives the features and every layer's hidden states of all its boundary nodes."""

    def __init__(self, data: ClientData, config: Config, seed: int) -> None:
        super().__init__(data, config, seed, rate=1.0)
