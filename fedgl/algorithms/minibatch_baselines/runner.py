"""Entry points of the baselines; each is the shared mini-batch run with its own schedule."""

from __future__ import annotations

from typing import Any

from fedgl.algorithms.minibatch.runner import predict_minibatch, run_minibatch
from fedgl.algorithms.minibatch.server import PeriodicSchedule, Schedule, ShrinkingSchedule
from fedgl.algorithms.minibatch.settings import MiniBatchSettings
from fedgl.data.graph import GraphData
from fedgl.results import RepeatResult

#: the baselines this module runs
BASELINES = ("fedgnn-g", "local-only", "llcg", "fedgnn-pns")


def baseline_schedule(name: str, cfg: Any, s: MiniBatchSettings) -> tuple[Schedule, int]:
    """Baseline ``name``'s FedSGD schedule and its PNS fan-out (-1: no PNS cache), from the
    configuration alone (the local driver and a deployed server build the same one).

    - FedGNN-G: every client trains cross-client in every iteration (I = 1, K = M);
    - local-only: no cross-client training (K = 0);
    - LLCG: local iterations; every ``correction_period`` iterations a correction step in which
      ``correction_clients`` (0 = all) clients train cross-client with all neighbours;
    - FedGNN-PNS: cached cross-client neighbours, re-sampled at shrinking intervals."""
    if name == "fedgnn-g":
        return PeriodicSchedule(1, int(cfg.clients), list(s.num_neighbors)), -1
    if name == "local-only":
        return PeriodicSchedule(1, 0, list(s.num_neighbors)), -1
    if name == "llcg":
        k = int(cfg.correction_clients) or int(cfg.clients)
        return PeriodicSchedule(int(cfg.correction_period), k, [-1] * s.layers), -1
    if name == "fedgnn-pns":
        return (ShrinkingSchedule(int(cfg.pns_interval), float(cfg.pns_decay),
                                  int(cfg.pns_min_interval)), int(cfg.pns_fanout))
    raise ValueError(f"'{name}' is not one of the mini-batch baselines {BASELINES}")


def deployed_schedule(cfg: Any, s: MiniBatchSettings) -> tuple[Schedule, int]:
    """The configured baseline's schedule for the deployed mini-batch driver."""
    return baseline_schedule(cfg.algorithm, cfg, s)


def _run(graph: GraphData, cfg: Any, name: str, kw: dict) -> RepeatResult:
    schedule, pns_fanout = baseline_schedule(name, cfg, MiniBatchSettings.from_config(cfg))
    return run_minibatch(graph, cfg, repeat=kw["repeat"], seed=kw["seed"],
                         progress=kw["progress"], schedule=schedule, name=name,
                         optimizer=cfg.server_optimizer, eval_mode=cfg.eval_mode,
                         pns_fanout=pns_fanout, resume_from=kw.get("resume_from"),
                         checkpointer=kw.get("checkpointer"), on_round=kw.get("on_round"))


def run_fedgnn_g(graph: GraphData, cfg: Any, **kw: Any) -> RepeatResult:
    """FedGNN-G: every client trains cross-client in every iteration (I = 1, K = M)."""
    return _run(graph, cfg, "fedgnn-g", kw)


def run_local_only(graph: GraphData, cfg: Any, **kw: Any) -> RepeatResult:
    """Local-only FedSGD: no cross-client training (K = 0)."""
    return _run(graph, cfg, "local-only", kw)


def run_llcg(graph: GraphData, cfg: Any, **kw: Any) -> RepeatResult:
    """LLCG: local iterations with a periodic full-neighbour cross-client correction step."""
    return _run(graph, cfg, "llcg", kw)


def run_pns(graph: GraphData, cfg: Any, **kw: Any) -> RepeatResult:
    """FedGNN-PNS: cached cross-client neighbours, re-sampled at shrinking intervals."""
    return _run(graph, cfg, "fedgnn-pns", kw)


def predict_baseline(graph: GraphData, cfg: Any, seed: int, parts: dict) -> tuple:
    """Every client's predictions of a saved mini-batch baseline's model, evaluated as the run
    evaluates (``eval_mode``)."""
    schedule, pns_fanout = baseline_schedule(cfg.algorithm, cfg,
                                             MiniBatchSettings.from_config(cfg))
    return predict_minibatch(graph, cfg, seed, parts["global"], schedule=schedule,
                             eval_mode=cfg.eval_mode, pns_fanout=pns_fanout)
