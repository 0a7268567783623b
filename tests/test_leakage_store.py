"""The leakage report's disk store (fedgl.privacy.leakage_store): a stored report reads back
equal to the computed one, and anything the report depends on (inputs, settings, its code)
names another file."""

from __future__ import annotations

import json

import pytest

import fedgl
import fedgl.privacy.leakage as leakage
import fedgl.privacy.leakage_job as leakage_job
import fedgl.privacy.leakage_store as leakage_store
from fedgl.api import as_config
from fedgl.data.datasets import load_graph
from fedgl.data.shards import make_partition

SMALL = dict(dataset="sbm", sbm_nodes=150, sbm_features=6, clients=3, rounds=2, hops=2,
             progress=False, oracle_eval=False, seed=3)


@pytest.fixture
def store(monkeypatch, tmp_path):
    """The store on, in a temporary folder; this process's cache empty; the computations of
    the report counted (the report function itself stays, so the store is used)."""
    folder = tmp_path / "leakage"
    monkeypatch.setenv("FEDGL_LEAKAGE_CACHE", str(folder))
    monkeypatch.setattr(leakage_job, "_CACHE", type(leakage_job._CACHE)())
    calls: list[int] = []
    real = leakage._leakage_report

    def counted(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(leakage, "_leakage_report", counted)
    return folder, calls


def _inputs(**changed):
    cfg = as_config(None, algorithm="fedgcn", **{**SMALL, **changed})
    graph = load_graph(cfg)
    return graph, make_partition(graph, cfg, cfg.seed), cfg


def _forget(monkeypatch):
    """A new process: nothing in memory, only what is on disk."""
    monkeypatch.setattr(leakage_job, "_CACHE", type(leakage_job._CACHE)())


def test_a_stored_report_reads_back_equal_to_the_computed_one(store, monkeypatch):
    folder, calls = store
    graph, part, cfg = _inputs()
    computed = leakage_job.cached_report(graph, part, cfg)
    assert len(calls) == 1 and len(list(folder.glob("*.json"))) == 1
    _forget(monkeypatch)
    read = leakage_job.cached_report(graph, part, cfg)
    assert len(calls) == 1                       # read from disk, not computed
    assert read == computed == leakage.leakage_report(graph, part, cfg)
    assert json.dumps(read) == json.dumps(computed)


@pytest.mark.parametrize("changed", [{"seed": 4}, {"min_contributors": 2}, {"hops": 1},
                                     {"secure_sum": "mask"}, {"sbm_features": 7}])
def test_a_changed_input_misses_the_store(store, monkeypatch, changed):
    folder, calls = store
    graph, part, cfg = _inputs()
    leakage_job.cached_report(graph, part, cfg)
    _forget(monkeypatch)
    other = _inputs(**changed)
    assert leakage_job.cached_report(*other) == leakage.leakage_report(*other)
    assert len(calls) == 3 and len(list(folder.glob("*.json"))) == 2


def test_changed_report_code_misses_the_store(store, monkeypatch):
    folder, calls = store
    graph, part, cfg = _inputs()
    leakage_job.cached_report(graph, part, cfg)
    _forget(monkeypatch)
    monkeypatch.setattr(leakage_store, "code_digest", lambda: "another version of the code")
    leakage_job.cached_report(graph, part, cfg)
    assert len(calls) == 2 and len(list(folder.glob("*.json"))) == 2


def test_a_damaged_or_foreign_file_is_computed_again(store, monkeypatch):
    folder, calls = store
    graph, part, cfg = _inputs()
    computed = leakage_job.cached_report(graph, part, cfg)
    (path,) = folder.glob("*.json")
    for text in ('{"key": "', json.dumps({"key": "other", "report": {}})):
        path.write_text(text)
        _forget(monkeypatch)
        assert leakage_job.cached_report(graph, part, cfg) == computed
    assert len(calls) == 3
    assert json.loads(path.read_text())["report"] == computed   # replaced


def test_the_store_off_writes_nothing(store, monkeypatch):
    folder, calls = store
    monkeypatch.setenv("FEDGL_LEAKAGE_CACHE", "off")
    graph, part, cfg = _inputs()
    leakage_job.cached_report(graph, part, cfg)
    _forget(monkeypatch)
    leakage_job.cached_report(graph, part, cfg)
    assert len(calls) == 2 and not folder.exists()


def test_a_replaced_report_function_is_never_stored(store):
    folder, _ = store
    graph, part, cfg = _inputs()
    key = leakage_job.cache_key(graph, part, cfg)
    assert key is not None and key.stored is not None
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(leakage, "leakage_report", lambda *args: {"made": "up"})
        assert leakage_job.cache_key(graph, part, cfg).stored is None
        assert leakage_job.cached_report(graph, part, cfg) == {"made": "up"}
    assert not folder.exists()


def test_the_store_keeps_the_most_recently_used(store, monkeypatch):
    folder, calls = store
    monkeypatch.setattr(leakage_store, "MAX_REPORTS", 2)
    for seed in (4, 5, 6):
        leakage_job.cached_report(*_inputs(seed=seed))
    assert len(list(folder.glob("*.json"))) == 2


def test_a_run_reads_the_stored_report_and_starts_no_process(store, monkeypatch):
    """A second run of the same inputs (in a new process) records the same report, read from
    the store, with no report process or thread started."""
    folder, calls = store
    monkeypatch.setattr(leakage_job, "PROCESS_MIN_CELLS", 0)
    monkeypatch.setattr(leakage_job, "idle_cpu", lambda: False)
    first = fedgl.run(algorithm="fedgcn", **SMALL).repeats[0]
    assert len(calls) == 1
    _forget(monkeypatch)
    monkeypatch.setattr(leakage_job, "idle_cpu", lambda: True)
    monkeypatch.setattr(leakage_job, "spare_core", lambda: True)
    monkeypatch.setattr(leakage_job.ReportProcess, "start",
                        classmethod(lambda cls, *a: pytest.fail("a process was started")))
    second = fedgl.run(algorithm="fedgcn", **SMALL).repeats[0]
    assert len(calls) == 1
    assert second.extra["leakage"] == first.extra["leakage"]
    assert second.history == first.history


def test_the_inputs_digest_tells_any_feature_bit_apart():
    """The features are hashed by their non-zero bits where sparse, whole where dense: any
    changed bit, -0.0 for 0.0 included, gives another digest, in either form."""
    import hashlib

    import torch

    from fedgl.privacy.leakage_job import _update_with_matrix

    def digest(x):
        h = hashlib.blake2b(digest_size=20)
        _update_with_matrix(h, x)
        return h.hexdigest()

    sparse = torch.zeros(30, 20)
    sparse[3, 4], sparse[7, 1] = 1.5, -2.0
    dense = torch.randn(30, 20, generator=torch.Generator().manual_seed(0))
    for x in (sparse, dense):
        base = digest(x)
        for i, j, v in ((0, 0, -0.0), (3, 4, 1.5000001), (29, 19, 3.0)):
            y = x.clone()
            y[i, j] = v
            assert digest(y) != base, (i, j, v)
        assert digest(x.clone()) == base
