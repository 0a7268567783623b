"""Centralised GAT: the whole graph at one party; FedGAT's upper reference (paper Table 1).

One party owns every node (a :class:`DistGATClient` of a one-client partition: its local
subgraph is the full graph), takes ``rounds x local_steps`` full-graph steps and is evaluated
every ``eval_every`` rounds, like the centralised GCN baseline. The paper reports *peak* test
accuracy for this row; we report the final and the validation-selected value.
"""

from __future__ import annotations

import time

import numpy as np

from fedgl.algorithms.baselines.dist_gat import DistGATClient
from fedgl.algorithms.fedgat import GATOracle, gat_initial_weights
from fedgl.algorithms.runner import _progress_info, finish_repeat
from fedgl.config import Config
from fedgl.data.client_data import split_graph
from fedgl.data.graph import GraphData
from fedgl.data.partition import Partition
from fedgl.federation.ledger import Ledger
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
    ledger = Ledger()
    progress.start(f"centralized-gat repeat {repeat + 1}/{cfg.repeats}", cfg.rounds)
    history = []
    for t in range(1, cfg.rounds + 1):
        with ledger.timer("train"):
            out = party.fit(weights, cfg.local_steps, round=t)
            weights = out["weights"]
        row = {"round": t, "train_loss": out["loss"]}
        if t % cfg.eval_every == 0 or t == cfg.rounds:
            with ledger.timer("eval"):
                ev = party.evaluate(weights)
            for i, split in enumerate(("train", "val", "test")):
                row[f"{split}_acc"] = (ev["correct"][i] / ev["total"][i] if ev["total"][i]
                                       else float("nan"))
            if oracle is not None:
                row.update(oracle(weights))
        history.append(row)
        progress.advance(_progress_info(row))
    seconds = {"pretrain": 0.0, "train": ledger.seconds("train"), "eval": ledger.seconds("eval"),
               "total": time.perf_counter() - t0}
    return finish_repeat(repeat, seed, whole.stats(graph), history, ledger.summary(), seconds)
