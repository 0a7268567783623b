"""The training loop of a single party that owns the whole graph (the centralised baselines).

One party takes ``rounds x local_steps`` full-graph gradient steps through the same
``fit``/``evaluate`` interface as a federated client (no communication, so the ledger only
times phases) and is evaluated every ``eval_every`` rounds, like the federated runs it is
compared with.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fedgl.algorithms.runner import divergence, finish_repeat, network_columns
from fedgl.algorithms.watch import progress_info
from fedgl.config import Config
from fedgl.data.graph import GraphData
from fedgl.data.partition import Partition
from fedgl.evaluation import pooled_accuracy
from fedgl.federation.aggregate import State
from fedgl.federation.ledger import Ledger
from fedgl.federation.network import NetworkModel
from fedgl.progress import RoundProgress
from fedgl.results import RepeatResult
from fedgl.trained import ModelTracker


def run_single_party(name: str, graph: GraphData, cfg: Config, whole: Partition, party: Any,
                     weights: State, oracle: Callable[[State], dict] | None, *, repeat: int,
                     seed: int, progress: RoundProgress, started: float) -> RepeatResult:
    """Train ``party`` (a client whose local subgraph is the full graph) from ``weights``.

    ``started`` is the ``perf_counter`` value when set-up began: the time until this call is
    reported as ``setup``.
    """
    ledger = Ledger()
    ledger.network = NetworkModel.from_strings(getattr(cfg, "bandwidth", ""),
                                               getattr(cfg, "latency", ""))
    setup_seconds = time.perf_counter() - started
    oracle_seconds = 0.0
    progress.start(f"{name} repeat {repeat + 1}/{cfg.repeats}", cfg.rounds)
    history = []
    diverged: dict | None = None
    tracker = ModelTracker()
    for t in range(1, cfg.rounds + 1):
        with ledger.timer("train"):
            out = party.fit(weights, cfg.local_steps, round=t)
            weights = out["weights"]
        row = {"round": t, "train_loss": out["loss"], **network_columns(ledger)}
        if t % cfg.eval_every == 0 or t == cfg.rounds:
            with ledger.timer("eval"):
                ev = party.evaluate(weights)
            row.update(pooled_accuracy({0: ev}))
            if oracle is not None:
                o0 = time.perf_counter()
                row.update(oracle(weights))
                oracle_seconds += time.perf_counter() - o0
        history.append(row)
        tracker.observe(t, weights, row)
        progress.advance(progress_info(row))
        diverged = divergence(t, weights, row["train_loss"], cfg)
        if diverged is not None:
            break
    seconds = {"setup": setup_seconds, "pretrain": 0.0, "train": ledger.seconds("train"),
               "eval": ledger.seconds("eval"), "oracle": oracle_seconds,
               "total": time.perf_counter() - started}
    result = finish_repeat(repeat, seed, whole.stats(graph), history, ledger.summary(), seconds)
    result.model = tracker.record()
    if diverged is not None:
        result.extra["diverged"] = diverged
        result.final["diverged_round"] = diverged["round"]
    return result
