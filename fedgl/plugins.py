"""What a third-party algorithm needs, in one public module (see docs/extending.md).

A plugin is a package with an entry point in the group ``fedgl.algorithms`` whose object is an
:class:`AlgorithmSpec`. The spec names the algorithm's setting, its options (a frozen dataclass of
:func:`option` fields, with an optional ``validate(self, cfg)``), and its entry point: a function
that runs one seeded repeat and returns a :class:`RepeatResult`, usually
:func:`run_federated` with a client and a server class::

    run_repeat(graph, cfg, *, repeat, seed, progress, resume_from=None, checkpointer=None,
               on_round=None) -> RepeatResult

FedAvg-style algorithms subclass :class:`FedAvgClient` (trains on its local subgraph; override
:meth:`~GNNClient.local_loss` or :meth:`~GNNClient.model_inputs`) or :class:`GNNClient`, and
:class:`FedAvgServer` (override ``pretrain`` for a pre-training exchange). The runtime, ledger,
checkpoints, results, sweeps and reports then work as for the built-in algorithms.

``fedgl.plugins`` imports torch (the base classes do); the registry finds plugins from package
metadata, so only a run of a plugin algorithm imports its module.
"""

from __future__ import annotations

from fedgl.algorithms.base import (
    FedAvgClient,
    FedAvgServer,
    GNNClient,
    ModelInputs,
    client_seed,
    local_subgraph_inputs,
)
from fedgl.algorithms.runner import run_federated
from fedgl.config import Config, option
from fedgl.config.fields import at_least, at_most, choice
from fedgl.config.plugins import GROUP, Plugin, discover
from fedgl.config.registry import PRIVACY_FEATURES, AlgorithmSpec, register
from fedgl.data.client_data import ClientData
from fedgl.data.graph import GraphData
from fedgl.errors import ConfigError, FedglError, PluginError
from fedgl.federation.aggregate import State
from fedgl.results import RepeatResult

__all__ = ["GROUP", "PRIVACY_FEATURES", "AlgorithmSpec", "ClientData", "Config", "ConfigError",
           "FedAvgClient", "FedAvgServer", "FedglError", "GNNClient", "GraphData", "ModelInputs",
           "Plugin", "PluginError", "RepeatResult", "State", "at_least", "at_most", "choice",
           "client_seed", "discover", "local_subgraph_inputs", "option", "register",
           "run_federated"]
