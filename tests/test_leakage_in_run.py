"""The run's leakage report is the report of its graph and partition; a failing report fails
the run."""

from __future__ import annotations

import pytest

import fedgl
import fedgl.privacy.leakage as leakage
import fedgl.privacy.leakage_job as leakage_job
from fedgl.api import as_config
from fedgl.data.datasets import load_graph
from fedgl.data.shards import make_partition
from fedgl.privacy.leakage import leakage_report

SMALL = dict(dataset="sbm", sbm_nodes=150, sbm_features=6, clients=3, rounds=2, hops=2,
             progress=False, oracle_eval=False, seed=3)


def _direct():
    cfg = as_config(None, algorithm="fedgcn", **SMALL)
    graph = load_graph(cfg)
    return leakage_report(graph, make_partition(graph, cfg, cfg.seed), cfg)


def test_the_runs_report_is_the_report_of_its_graph_and_partition():
    assert fedgl.run(algorithm="fedgcn", **SMALL).repeats[0].extra["leakage"] == _direct()


def test_a_failing_report_fails_the_run(monkeypatch):
    def broken(*args):
        raise ValueError("report broke")

    monkeypatch.setattr(leakage, "leakage_report", broken)
    with pytest.raises(ValueError, match="report broke"):
        fedgl.run(algorithm="fedgcn", **SMALL)


@pytest.mark.parametrize("beside", [True, False])
def test_the_report_is_the_same_beside_training_or_after_it(monkeypatch, beside):
    """Small graphs get the report on a thread while the parties train (where a core is
    spare), large ones after the repeat: the same report either way, no thread left behind."""
    import threading

    monkeypatch.setattr(leakage_job, "OVERLAP_MAX_NODES", 10**9 if beside else 0)
    monkeypatch.setattr(leakage_job, "spare_core", lambda: True)
    started = []
    real = threading.Thread.start

    def start(self):
        started.append(self.name)
        real(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    assert fedgl.run(algorithm="fedgcn", **SMALL).repeats[0].extra["leakage"] == _direct()
    assert ("fedgl-leakage-report" in started) == beside
    assert not [t for t in threading.enumerate() if t.name == "fedgl-leakage-report"]


def test_a_failed_repeat_waits_for_the_report_thread(monkeypatch):
    import threading

    import fedgl.algorithms.runner as runner

    monkeypatch.setattr(leakage_job, "spare_core", lambda: True)

    def broken(*args, **kwargs):
        raise RuntimeError("training broke")

    monkeypatch.setattr(runner, "drive_fedavg", broken)
    with pytest.raises(RuntimeError, match="training broke"):
        fedgl.run(algorithm="fedgcn", **SMALL)
    assert not [t for t in threading.enumerate() if t.name == "fedgl-leakage-report"]


def test_repeats_of_one_graph_and_partition_share_one_report(monkeypatch):
    """The cache returns the report computed before for the same inputs (a copy), and computes
    a new one when anything the report reads differs."""
    calls = []
    real = leakage.leakage_report

    def counted(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(leakage, "leakage_report", counted)
    monkeypatch.setattr(leakage_job, "_CACHE", type(leakage_job._CACHE)())
    cfg = as_config(None, algorithm="fedgcn", **SMALL)
    graph = load_graph(cfg)
    part = make_partition(graph, cfg, cfg.seed)
    first = leakage_job.cached_report(graph, part, cfg)
    first["per_client"].clear()                       # the caller's copy, not the cache's
    again = leakage_job.cached_report(graph, part, cfg)
    assert len(calls) == 1 and again == _direct()
    other_part = make_partition(graph, cfg, cfg.seed + 1)
    assert leakage_job.cached_report(graph, other_part, cfg) == \
        real(graph, other_part, cfg)
    for changed in ({"min_contributors": 2}, {"hops": 1}, {"secure_sum": "mask"}):
        ccfg = as_config(None, algorithm="fedgcn", **{**SMALL, **changed})
        assert leakage_job.cached_report(graph, part, ccfg) == real(graph, part, ccfg)
    assert len(calls) == 5
    assert len(leakage_job._CACHE) == leakage_job.CACHE_SIZE
