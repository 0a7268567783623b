"""fedgl: federated graph learning with an honest, byte-counting federation runtime.

>>> import fedgl
>>> result = fedgl.run(dataset="sbm", hops=2, rounds=10, progress=False)
>>> sorted(result.summary)[:2]
['oracle_test_acc', 'pretrain_bytes']

The names below are imported on first use (PEP 562), so ``import fedgl`` and the ``fedgl``
command start without importing torch; a Ctrl-C during start-up is then handled by the CLI
like any other.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from fedgl.errors import ConfigError, DataError, FedglError, OutputError
from fedgl.version import __version__

_LAZY = {
    "as_config": "fedgl.api", "load_graph": "fedgl.api", "run": "fedgl.api",
    "run_shards": "fedgl.api",
    "Config": "fedgl.config", "ClientData": "fedgl.data.client_data",
    "split_graph": "fedgl.data.client_data", "load_dataset": "fedgl.data.datasets",
    "GraphData": "fedgl.data.graph", "from_pyg": "fedgl.data.graph",
    "Partition": "fedgl.data.partition", "partition": "fedgl.data.partition",
    "RunResult": "fedgl.results", "DivergenceError": "fedgl.errors",
    "load_model": "fedgl.inference.load", "predict": "fedgl.inference.predict",
}

if TYPE_CHECKING:  # pragma: no cover
    from fedgl.api import as_config, load_graph, run, run_shards
    from fedgl.config import Config
    from fedgl.data.client_data import ClientData, split_graph
    from fedgl.data.datasets import load_dataset
    from fedgl.data.graph import GraphData, from_pyg
    from fedgl.data.partition import Partition, partition
    from fedgl.errors import DivergenceError
    from fedgl.inference.load import load_model
    from fedgl.inference.predict import predict
    from fedgl.results import RunResult


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'fedgl' has no attribute '{name}'")


__all__ = ["ClientData", "Config", "ConfigError", "DataError", "DivergenceError", "FedglError",
           "GraphData", "OutputError", "Partition", "RunResult", "as_config", "from_pyg",
           "load_dataset", "load_graph", "load_model", "partition", "predict", "run",
           "run_shards", "split_graph", "__version__"]
