"""Entry point of a Swift-FedGNN repeat (``fedgl run --algorithm swift-fedgnn``)."""

from __future__ import annotations

from typing import Any

from fedgl.algorithms.minibatch.runner import predict_minibatch, run_minibatch
from fedgl.algorithms.minibatch.settings import MiniBatchSettings
from fedgl.algorithms.swift_fedgnn.server import swift_schedule
from fedgl.data.graph import GraphData
from fedgl.results import RepeatResult


def run_repeat(graph: GraphData, cfg: Any, *, repeat: int, seed: int, progress: Any,
               resume_from: Any = None, checkpointer: Any = None, on_round: Any = None
               ) -> RepeatResult:
    """One seeded Swift-FedGNN run; ``cfg.rounds`` is the number of iterations T."""
    settings = MiniBatchSettings.from_config(cfg)
    return run_minibatch(graph, cfg, repeat=repeat, seed=seed, progress=progress,
                         schedule=swift_schedule(cfg, settings), name="swift-fedgnn",
                         optimizer=cfg.server_optimizer, eval_mode=cfg.eval_mode,
                         resume_from=resume_from, checkpointer=checkpointer,
                         on_round=on_round)


def predict_repeat(graph: GraphData, cfg: Any, seed: int, parts: dict) -> tuple:
    """Every client's predictions of a saved Swift-FedGNN model, evaluated as the run evaluates
    (``eval_mode``: cross-client, full neighbours, or local)."""
    settings = MiniBatchSettings.from_config(cfg)
    return predict_minibatch(graph, cfg, seed, parts["global"],
                             schedule=swift_schedule(cfg, settings), eval_mode=cfg.eval_mode)
