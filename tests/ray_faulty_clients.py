"""Client classes that fail on purpose, for the Ray start-up tests (imported by the actors)."""

from __future__ import annotations

import os
from pathlib import Path

from fedgl.algorithms.fedgcn.client import FedGCNClient


class DiesOnceAtStartClient(FedGCNClient):
    """Client 0's process dies the first time it starts (a marker file next to ``cfg.out``
    records that it did); every later start, and every other client, is a normal FedGCN client."""

    def __init__(self, data, config, seed):  # type: ignore[no-untyped-def]
        marker = Path(str(config.out)).parent / f"died-once-{data.client_id}"
        if data.client_id == 0 and not marker.exists():
            marker.touch()
            os._exit(1)
        super().__init__(data, config, seed)


class AlwaysDiesAtStartClient(FedGCNClient):
    def __init__(self, data, config, seed):  # type: ignore[no-untyped-def]
        if data.client_id == 1:
            os._exit(1)
        super().__init__(data, config, seed)
