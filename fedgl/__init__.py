"""fedgl: federated graph learning with an honest, byte-counting federation runtime.

>>> import fedgl
>>> result = fedgl.run(dataset="sbm", hops=2, rounds=10, progress=False)
>>> sorted(result.summary)[:2]
['oracle_test_acc', 'pretrain_bytes']
"""

from __future__ import annotations

from fedgl.api import as_config, load_graph, run
from fedgl.config import Config
from fedgl.data.client_data import ClientData, split_graph
from fedgl.data.datasets import load_dataset
from fedgl.data.graph import GraphData
from fedgl.data.partition import Partition, partition
from fedgl.errors import ConfigError, DataError, FedglError
from fedgl.results import RunResult
from fedgl.version import __version__

__all__ = ["ClientData", "Config", "ConfigError", "DataError", "FedglError", "GraphData",
           "Partition", "RunResult", "as_config", "load_dataset", "load_graph", "partition",
           "run", "split_graph", "__version__"]
