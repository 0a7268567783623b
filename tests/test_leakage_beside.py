"""The leakage report computed beside the repeat (a forked process) is the report computed
after it; a failing report fails the run in the run's own process; a repeat that does not
fork (more torch threads) gives the same report."""

from __future__ import annotations

import pytest
import torch

import fedgl
import fedgl.algorithms.leakage_beside as beside
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


def test_the_report_beside_the_repeat_is_the_report_after_it(monkeypatch):
    forks = []
    original = beside.LeakageReport.beside
    monkeypatch.setattr(beside.LeakageReport, "beside",
                        staticmethod(lambda g, c: forks.append(original(g, c)) or forks[-1]))
    got = fedgl.run(algorithm="fedgcn", **SMALL).repeats[0].extra["leakage"]
    assert forks == [True]
    assert got == _direct()


def test_without_fork_the_report_is_the_same(monkeypatch):
    monkeypatch.setattr(beside.LeakageReport, "beside", staticmethod(lambda g, c: False))
    assert fedgl.run(algorithm="fedgcn", **SMALL).repeats[0].extra["leakage"] == _direct()


def test_two_threads_do_not_fork():
    cfg = as_config(None, algorithm="fedgcn", **SMALL)
    graph = load_graph(cfg)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert not beside.LeakageReport.beside(graph, cfg)
        torch.set_num_threads(1)
        assert beside.LeakageReport.beside(graph, cfg)
        assert not beside.LeakageReport.beside(graph, cfg.replace(runtime="ray"))
    finally:
        torch.set_num_threads(before)


def test_a_failing_report_fails_the_run(monkeypatch):
    def broken(*args):
        raise ValueError("report broke")

    monkeypatch.setattr(beside, "leakage_report", broken)
    with pytest.raises(ValueError, match="report broke"):
        fedgl.run(algorithm="fedgcn", **SMALL)
