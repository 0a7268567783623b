"""The oracle on its own thread (fedgl.algorithms.watch.OracleAhead, where a CPU is spare):
the same history as scoring each round after it, and no thread left behind."""

from __future__ import annotations

import threading

import pytest

import fedgl
import fedgl.privacy.leakage_job as leakage_job
from fedgl.algorithms.watch import OracleAhead

SMALL = dict(algorithm="fedgcn", dataset="sbm", sbm_nodes=200, clients=4, rounds=6, hops=2,
             progress=False, seed=2, leakage_report=False)


def _oracle_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("fedgl-oracle")]


@pytest.mark.parametrize("changed", [{}, {"eval_every": 2}, {"clients_per_round": 2}])
def test_the_same_history_with_the_oracle_ahead(monkeypatch, changed):
    monkeypatch.setattr(leakage_job, "spare_core", lambda: False)
    after = fedgl.run(**SMALL, **changed).repeats[0]
    started = []
    real = OracleAhead.submit

    def submit(self, weights):
        started.append(1)
        real(self, weights)

    monkeypatch.setattr(OracleAhead, "submit", submit)
    monkeypatch.setattr(leakage_job, "spare_core", lambda: True)
    ahead = fedgl.run(**SMALL, **changed).repeats[0]
    assert started
    assert ahead.history == after.history
    assert ahead.final == {**after.final, "pretrain_seconds": ahead.final["pretrain_seconds"],
                           "train_seconds": ahead.final["train_seconds"]}
    assert not _oracle_threads()


def test_a_failing_oracle_fails_the_run_and_leaves_no_thread(monkeypatch):
    import fedgl.evaluation as evaluation

    monkeypatch.setattr(leakage_job, "spare_core", lambda: True)

    def broken(self, weights):
        raise ValueError("oracle broke")

    monkeypatch.setattr(evaluation.OracleEvaluator, "__call__", broken)
    with pytest.raises(ValueError, match="oracle broke"):
        fedgl.run(**SMALL)
    assert not _oracle_threads()


def test_scores_a_model_it_was_not_given_ahead():
    seen = []
    ahead = OracleAhead(lambda w: seen.append(dict(w)) or {"n": len(seen)})
    ahead.submit({"a": 1})
    assert ahead({"b": 2}) == {"n": 2}       # scored on the same thread, after the first
    ahead.close()
    assert seen == [{"a": 1}, {"b": 2}]
