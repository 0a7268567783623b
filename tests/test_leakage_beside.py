"""The leakage report computed beside the repeat (a forked process) is the report computed
after it; a failing report fails the run in the run's own process; a repeat that does not
fork (more torch threads, another runtime, gRPC loaded) gives the same report."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


_FORKED = """
import fedgl, fedgl.algorithms.leakage_beside as beside
from tests.test_leakage_beside import SMALL, _direct
forks = []
original = beside.LeakageReport.beside
beside.LeakageReport.beside = staticmethod(lambda g, c: forks.append(original(g, c)) or forks[-1])
got = fedgl.run(algorithm="fedgcn", **SMALL).repeats[0].extra["leakage"]
assert forks == [True], forks
assert got == _direct()
print("same report")
"""


def test_the_report_beside_the_repeat_is_the_report_after_it():
    """In a fresh interpreter (this one may have loaded gRPC with an earlier Ray or Flower
    test, which turns the fork off)."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", _FORKED], env=env, cwd=root,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("same report")


def test_without_fork_the_report_is_the_same(monkeypatch):
    monkeypatch.setattr(beside.LeakageReport, "beside", staticmethod(lambda g, c: False))
    assert fedgl.run(algorithm="fedgcn", **SMALL).repeats[0].extra["leakage"] == _direct()


def test_two_threads_do_not_fork(monkeypatch):
    cfg = as_config(None, algorithm="fedgcn", **SMALL)
    graph = load_graph(cfg)
    before = torch.get_num_threads()
    # as in a process that has run no Ray or Flower session (earlier tests may have)
    monkeypatch.delitem(sys.modules, "grpc", raising=False)
    try:
        torch.set_num_threads(2)
        assert not beside.LeakageReport.beside(graph, cfg)
        torch.set_num_threads(1)
        assert beside.LeakageReport.beside(graph, cfg)
        assert not beside.LeakageReport.beside(graph, cfg.replace(runtime="ray"))
        monkeypatch.setitem(sys.modules, "grpc", object())   # a Ray or Flower session before
        assert not beside.LeakageReport.beside(graph, cfg)
    finally:
        torch.set_num_threads(before)


def test_a_failing_report_fails_the_run(monkeypatch):
    def broken(*args):
        raise ValueError("report broke")

    monkeypatch.setattr(beside, "leakage_report", broken)
    with pytest.raises(ValueError, match="report broke"):
        fedgl.run(algorithm="fedgcn", **SMALL)
