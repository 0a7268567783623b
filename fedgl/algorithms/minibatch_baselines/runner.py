"""Entry points of the baselines; each is the shared mini-batch run with its own schedule."""

from __future__ import annotations

from typing import Any

from fedgl.algorithms.minibatch.runner import run_minibatch
from fedgl.algorithms.minibatch.server import PeriodicSchedule, ShrinkingSchedule
from fedgl.algorithms.minibatch.settings import MiniBatchSettings
from fedgl.data.graph import GraphData
from fedgl.results import RepeatResult


def _run(graph: GraphData, cfg: Any, schedule: Any, name: str, kw: dict, **extra: Any
         ) -> RepeatResult:
    return run_minibatch(graph, cfg, repeat=kw["repeat"], seed=kw["seed"],
                         progress=kw["progress"], schedule=schedule, name=name,
                         optimizer=cfg.server_optimizer, eval_mode=cfg.eval_mode,
                         resume_from=kw.get("resume_from"), checkpointer=kw.get("checkpointer"),
                         on_round=kw.get("on_round"), **extra)


def run_fedgnn_g(graph: GraphData, cfg: Any, **kw: Any) -> RepeatResult:
    """FedGNN-G: every client trains cross-client in every iteration (I = 1, K = M)."""
    s = MiniBatchSettings.from_config(cfg)
    return _run(graph, cfg, PeriodicSchedule(1, int(cfg.clients), list(s.num_neighbors)), "fedgnn-g", kw)


def run_local_only(graph: GraphData, cfg: Any, **kw: Any) -> RepeatResult:
    """Local-only FedSGD: no cross-client training (K = 0)."""
    s = MiniBatchSettings.from_config(cfg)
    return _run(graph, cfg, PeriodicSchedule(1, 0, list(s.num_neighbors)), "local-only", kw)


def run_llcg(graph: GraphData, cfg: Any, **kw: Any) -> RepeatResult:
    """LLCG: local iterations; every ``correction_period`` iterations a correction step in which
    ``correction_clients`` (0 = all) clients train cross-client with all neighbours."""
    s = MiniBatchSettings.from_config(cfg)
    k = int(cfg.correction_clients) or int(cfg.clients)
    return _run(graph, cfg, PeriodicSchedule(int(cfg.correction_period), k, [-1] * s.layers),
                "llcg", kw)


def run_pns(graph: GraphData, cfg: Any, **kw: Any) -> RepeatResult:
    """FedGNN-PNS: cached cross-client neighbours, re-sampled at shrinking intervals."""
    sched = ShrinkingSchedule(int(cfg.pns_interval), float(cfg.pns_decay), int(cfg.pns_min_interval))
    return _run(graph, cfg, sched, "fedgnn-pns", kw, pns_fanout=int(cfg.pns_fanout))
