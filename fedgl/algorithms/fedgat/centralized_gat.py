"""Centralised GAT: the whole graph at one party; FedGAT's upper reference (paper Table 1).

One party owns every node (a :class:`DistGATClient` of a one-client partition: its local
subgraph is the full graph), takes ``rounds x local_steps`` full-graph steps and is evaluated
every ``eval_every`` rounds, like the centralised GCN baseline. The paper reports *peak* test
accuracy for this row; we report the final and the validation-selected value.
"""

from __future__ import annotations

import time

import numpy as np

from fedgl.algorithms.fedgat.common import GATOracle, gat_initial_weights
from fedgl.algorithms.fedgat.dist_gat import DistGATClient
from fedgl.algorithms.single_party import run_single_party
from fedgl.config import Config
from fedgl.data.client_data import split_graph
from fedgl.data.graph import GraphData
from fedgl.data.partition import Partition
from fedgl.progress import RoundProgress
from fedgl.results import RepeatResult


def run_centralized_gat(graph: GraphData, cfg: Config, *, repeat: int, seed: int,
                        progress: RoundProgress, **_unused) -> RepeatResult:
    t0 = time.perf_counter()
    whole = Partition(np.zeros(graph.num_nodes, dtype=np.int64), 1)
    (data,) = split_graph(graph, whole)
    party = DistGATClient(data, cfg, seed)
    oracle = GATOracle(graph, cfg, seed, approximate=False) if cfg.oracle_eval else None
    weights = gat_initial_weights(cfg, graph.num_features, graph.num_classes, seed)
    return run_single_party("centralized-gat", graph, cfg, whole, party, weights, oracle,
                            repeat=repeat, seed=seed, progress=progress, started=t0)


def predict_centralized_gat(graph: GraphData, cfg: Config, seed: int, parts: dict) -> tuple:
    """The one party scores every node with a saved centralised GAT."""
    from fedgl.algorithms.runner import predict_single_party

    whole = Partition(np.zeros(graph.num_nodes, dtype=np.int64), 1)
    (data,) = split_graph(graph, whole)
    return predict_single_party(graph, DistGATClient(data, cfg, seed), parts["global"])
