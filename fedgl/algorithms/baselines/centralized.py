"""Centralised GCN: the whole graph at one party; the upper reference in every table.

As in the FedGCN code, it takes ``rounds x local_steps`` full-graph gradient steps (one party,
the same loop as a client, no communication) and is evaluated once per round.
"""

from __future__ import annotations

import time

from fedgl.algorithms.fedgcn.client import FedGCNClient
from fedgl.algorithms.runner import _progress_info, finish_repeat, initial_weights
from fedgl.config import Config
from fedgl.data.client_data import split_graph
from fedgl.data.graph import GraphData
from fedgl.data.partition import Partition
from fedgl.evaluation import OracleEvaluator
from fedgl.federation.ledger import Ledger
from fedgl.progress import RoundProgress
from fedgl.results import RepeatResult


def run_centralized(graph: GraphData, cfg: Config, *, repeat: int, seed: int,
                    progress: RoundProgress) -> RepeatResult:
    import numpy as np

    t0 = time.perf_counter()
    whole = Partition(np.zeros(graph.num_nodes, dtype=np.int64), 1)
    (data,) = split_graph(graph, whole)
    # A single party owning every node: its "local subgraph" is the full graph, so the 0-hop
    # inputs are exactly the centralised GCN's (true degrees, every edge).
    party = FedGCNClient(data, cfg.replace(hops=0), seed)
    oracle = OracleEvaluator(graph, cfg) if cfg.oracle_eval else None
    weights = initial_weights(graph, cfg, seed)
    ledger = Ledger()
    setup_seconds = time.perf_counter() - t0
    oracle_seconds = 0.0
    progress.start(f"centralized repeat {repeat + 1}/{cfg.repeats}", cfg.rounds)
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
                total = ev["total"][i]
                row[f"{split}_acc"] = ev["correct"][i] / total if total else float("nan")
            if oracle is not None:
                o0 = time.perf_counter()
                row.update(oracle(weights))
                oracle_seconds += time.perf_counter() - o0
        history.append(row)
        progress.advance(_progress_info(row))
    seconds = {"setup": setup_seconds, "pretrain": 0.0, "train": ledger.seconds("train"),
               "eval": ledger.seconds("eval"), "oracle": oracle_seconds,
               "total": time.perf_counter() - t0}
    return finish_repeat(repeat, seed, whole.stats(graph), history, ledger.summary(), seconds)
