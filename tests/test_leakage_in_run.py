"""The run's leakage report is the report of its graph and partition; a failing report fails
the run."""

from __future__ import annotations

import pytest

import fedgl
import fedgl.algorithms.runner as runner
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

    monkeypatch.setattr(runner, "leakage_report", broken)
    with pytest.raises(ValueError, match="report broke"):
        fedgl.run(algorithm="fedgcn", **SMALL)
