"""Swift-FedGNN's client: the shared mini-batch FedSGD client (local training on its own
subgraph, Algorithm 3; its part of server-mediated cross-client training, Algorithm 2)."""

from __future__ import annotations

from fedgl.algorithms.minibatch.client import MiniBatchClient


class SwiftClient(MiniBatchClient):
    """No behaviour beyond :class:`MiniBatchClient`; named for the algorithm's layout."""
