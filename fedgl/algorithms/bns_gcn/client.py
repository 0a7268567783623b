"""The BNS-GCN client: the shared boundary exchange with ρ from the configuration."""

from __future__ import annotations

from fedgl.algorithms.bns_gcn.options import BNSGCNOptions
from fedgl.algorithms.boundary.client import BoundaryClient
from fedgl.config import Config
from fedgl.data.client_data import ClientData


class BNSGCNClient(BoundaryClient):
    """Keeps a random fraction ρ = ``boundary_rate`` of its boundary nodes every round."""

    def __init__(self, data: ClientData, config: Config, seed: int) -> None:
        opts = config.options
        assert isinstance(opts, BNSGCNOptions)
        super().__init__(data, config, seed, rate=opts.boundary_rate)
