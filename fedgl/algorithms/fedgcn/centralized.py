"""Centralised GCN: the whole graph at one party; the upper reference in every table.

As in the FedGCN code, it takes ``rounds x local_steps`` full-graph gradient steps (one party,
the same loop as a client, no communication) and is evaluated once per round.
"""

from __future__ import annotations

import time

import numpy as np

from fedgl.algorithms.fedgcn.client import FedGCNClient
from fedgl.algorithms.runner import initial_weights
from fedgl.algorithms.single_party import run_single_party
from fedgl.config import Config
from fedgl.data.client_data import split_graph
from fedgl.data.graph import GraphData
from fedgl.data.partition import Partition
from fedgl.evaluation import OracleEvaluator
from fedgl.progress import RoundProgress
from fedgl.results import RepeatResult


def run_centralized(graph: GraphData, cfg: Config, *, repeat: int, seed: int,
                    progress: RoundProgress, **_: object) -> RepeatResult:
    t0 = time.perf_counter()
    whole = Partition(np.zeros(graph.num_nodes, dtype=np.int64), 1)
    (data,) = split_graph(graph, whole)
    # A single party owning every node: its "local subgraph" is the full graph, so the 0-hop
    # inputs are exactly the centralised GCN's (true degrees, every edge).
    party = FedGCNClient(data, cfg.replace(algorithm="fedgcn", hops=0), seed)
    oracle = OracleEvaluator(graph, cfg) if cfg.oracle_eval else None
    return run_single_party("centralized", graph, cfg, whole, party,
                            initial_weights(graph, cfg, seed), oracle, repeat=repeat, seed=seed,
                            progress=progress, started=t0)


def predict_centralized(graph: GraphData, cfg: Config, seed: int, parts: dict) -> tuple:
    """The one party scores every node with a saved centralised GCN/SAGE."""
    from fedgl.algorithms.runner import predict_single_party

    whole = Partition(np.zeros(graph.num_nodes, dtype=np.int64), 1)
    (data,) = split_graph(graph, whole)
    party = FedGCNClient(data, cfg.replace(algorithm="fedgcn", hops=0), seed)
    return predict_single_party(graph, party, parts["global"])
