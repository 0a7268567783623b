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
    monkeypatch.setattr(leakage_job, "_CACHE", type(leakage_job._CACHE)())  # a known report
    started = []                                                            # starts no thread
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


def _process_path(monkeypatch) -> list:
    """Small graphs take the separate process here too; the processes started, recorded."""
    monkeypatch.setattr(leakage_job, "PROCESS_MIN_CELLS", 0)
    monkeypatch.setattr(leakage_job, "idle_cpu", lambda: True)
    monkeypatch.setattr(leakage_job, "_CACHE", type(leakage_job._CACHE)())
    started = []
    real = leakage_job.ReportProcess.start.__func__

    def start(cls, *args):
        started.append(real(cls, *args))
        return started[-1]

    monkeypatch.setattr(leakage_job.ReportProcess, "start", classmethod(start))
    return started


def test_the_report_is_the_same_in_a_process_of_its_own(monkeypatch):
    """Where a CPU is idle, the report of a large enough graph is computed by
    ``python -m fedgl.privacy.leakage_worker`` beside training: the same report, the process
    ended and its temporary folder gone when the repeat returns; a second repeat of the same
    inputs takes the cached report and starts none."""
    import os

    started = _process_path(monkeypatch)
    run = fedgl.run(algorithm="fedgcn", **{**SMALL, "repeats": 1})
    assert run.repeats[0].extra["leakage"] == _direct()
    assert len(started) == 1 and started[0].proc.returncode == 0
    assert not os.path.exists(started[0].folder)
    fedgl.run(algorithm="fedgcn", **SMALL)
    assert len(started) == 1


def test_a_report_process_that_fails_leaves_the_report_to_the_run(monkeypatch):
    import subprocess
    import sys
    import tempfile

    monkeypatch.setattr(leakage_job, "PROCESS_MIN_CELLS", 0)
    monkeypatch.setattr(leakage_job, "idle_cpu", lambda: True)
    monkeypatch.setattr(leakage_job, "_CACHE", type(leakage_job._CACHE)())

    def failing(cls, *args):
        proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(1)"],
                                stderr=subprocess.PIPE)
        return cls(tempfile.mkdtemp(prefix="fedgl-leakage-"), proc)

    monkeypatch.setattr(leakage_job.ReportProcess, "start", classmethod(failing))
    assert fedgl.run(algorithm="fedgcn", **SMALL).repeats[0].extra["leakage"] == _direct()


def test_a_failed_repeat_stops_the_report_process(monkeypatch):
    import os

    import fedgl.algorithms.runner as runner

    started = _process_path(monkeypatch)

    def broken(*args, **kwargs):
        raise RuntimeError("training broke")

    monkeypatch.setattr(runner, "drive_fedavg", broken)
    with pytest.raises(RuntimeError, match="training broke"):
        fedgl.run(algorithm="fedgcn", **SMALL)
    assert len(started) == 1 and started[0].proc.poll() is not None
    assert not os.path.exists(started[0].folder)


def test_the_worker_refuses_bad_arguments_in_one_line(tmp_path, capsys):
    from fedgl.privacy.leakage_worker import main

    assert main([]) == 2
    assert main([str(tmp_path / "absent.pkl"), str(tmp_path / "out.pkl")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("usage:") and err[1].startswith("fedgl leakage worker: ")
    assert not (tmp_path / "out.pkl").exists()


def test_the_worker_computes_the_report_without_torch(tmp_path):
    """The worker reads arrays, not tensors: the same report, and PyTorch never loaded."""
    import os
    import pickle
    import subprocess
    import sys
    from pathlib import Path

    from fedgl.privacy.leakage_worker import inputs

    cfg = as_config(None, algorithm="fedgcn", **SMALL)
    graph = load_graph(cfg)
    part = make_partition(graph, cfg, cfg.seed)
    with open(tmp_path / "in.pkl", "wb") as f:
        pickle.dump(inputs(graph, part, cfg.to_dict()), f)
    code = ("import sys\nfrom fedgl.privacy.leakage_worker import main\n"
            "code = main(sys.argv[1:])\nassert 'torch' not in sys.modules\nsys.exit(code)\n")
    repo = str(Path(__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "in.pkl"),
                           str(tmp_path / "out.pkl")], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": repo}, timeout=300)
    assert done.returncode == 0, done.stderr
    with open(tmp_path / "out.pkl", "rb") as f:
        assert pickle.load(f) == _direct()
