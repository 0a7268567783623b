"""DP counts every release: each client logs a release (fsync'ed) before it leaves, so crash,
resume, crash before the next checkpoint, resume reports all three releases, and an honest run's
ε is unchanged."""

from __future__ import annotations

import json

import pytest

import fedgl
from fedgl.algorithms.fedgcn import client as fedgcn_client
from fedgl.algorithms.fedgcn import server as fedgcn_server
from fedgl.privacy.dp import RELEASE_LOG_DIR, logged_releases
from tests.helpers import interrupt_at

BASE = dict(dataset="sbm", sbm_nodes=200, clients=3, rounds=4, dp_epsilon=2.0, progress=False)


def _crash_resume_crash_resume(out) -> fedgl.RunResult:
    """Checkpoint at round 2; stop at round 3; resume (a 2nd release), stop at round 3 again,
    before the next checkpoint; resume (a 3rd release) to the end."""
    with pytest.raises(KeyboardInterrupt):
        fedgl.run(**BASE, checkpoint_every=2, out=str(out), on_round=interrupt_at(3))
    with pytest.raises(KeyboardInterrupt):
        fedgl.run(resume=out, progress=False, on_round=interrupt_at(3))
    logs = sorted((out / RELEASE_LOG_DIR).glob("client-*.jsonl"))
    assert [p.name for p in logs] == ["client-0.jsonl", "client-1.jsonl", "client-2.jsonl"]
    for p in logs:
        lines = [json.loads(ln) for ln in p.read_text().splitlines()]
        assert len(lines) == 2 and {ln["seed"] for ln in lines} == {0}
        assert len({ln["release"] for ln in lines}) == 2 and lines[0]["epsilon"] == 2.0
    return fedgl.run(resume=out, progress=False)


def test_crash_resume_crash_resume_counts_three_releases(tmp_path):
    res = _crash_resume_crash_resume(tmp_path / "run")
    acc = res.repeats[0].extra["privacy"]["dp"]["accounting"]
    assert acc["releases_per_client"] == {"0": 3, "1": 3, "2": 3}
    assert acc["repeat_total"]["epsilon"] == 6.0
    assert acc["run_total"]["releases"] == 3 and acc["run_total"]["epsilon"] == 6.0
    saved = json.loads((tmp_path / "run" / "result.json").read_text())
    assert saved["repeats"][0]["extra"]["privacy"]["dp"]["accounting"]["repeat_total"][
        "epsilon"] == 6.0


def test_without_the_log_the_release_is_lost(tmp_path, monkeypatch):
    """Control: the same sequence without the clients' log reports 2 releases (ε 4.0), the
    undercount the log fixes."""
    monkeypatch.setattr(fedgcn_client, "record_release", lambda *a, **k: None)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        fedgl.run(**BASE, checkpoint_every=2, out=str(out), on_round=interrupt_at(3))
    with pytest.raises(KeyboardInterrupt):
        fedgl.run(resume=out, progress=False, on_round=interrupt_at(3))
    acc = fedgl.run(resume=out, progress=False).repeats[0].extra["privacy"]["dp"]["accounting"]
    assert acc["repeat_total"]["epsilon"] == 4.0


def test_honest_run_epsilon_is_unchanged(tmp_path):
    plain = fedgl.run(**BASE, repeats=2)
    logged = fedgl.run(**BASE, repeats=2, checkpoint_every=2, out=str(tmp_path / "run"))
    for res in (plain, logged):
        totals = [r.extra["privacy"]["dp"]["accounting"] for r in res.repeats]
        assert [t["releases_per_client"] for t in totals] == [{"0": 1, "1": 1, "2": 1}] * 2
        assert [t["repeat_total"]["epsilon"] for t in totals] == [2.0, 2.0]
        assert [t["run_total"]["epsilon"] for t in totals] == [2.0, 4.0]


def test_a_release_is_logged_before_the_server_receives_it(tmp_path, monkeypatch):
    order: list[tuple[str, str]] = []
    real_record = fedgcn_client.record_release
    real_count = fedgcn_server.FedGCNServer._count_releases

    def record(config, client_id, seed, release_id, mech):
        real_record(config, client_id, seed, release_id, mech)
        assert logged_releases(config.out, seed)[str(client_id)][-1] == release_id  # on disk
        order.append(("logged", release_id))

    def count(self, msgs):
        order.extend(("received", m["dp_release"]) for m in msgs.values()
                     if isinstance(m, dict) and "dp_release" in m)
        real_count(self, msgs)

    monkeypatch.setattr(fedgcn_client, "record_release", record)
    monkeypatch.setattr(fedgcn_server.FedGCNServer, "_count_releases", count)
    fedgl.run(**BASE, checkpoint_every=2, out=str(tmp_path / "run"))
    received = [rid for what, rid in order if what == "received"]
    assert len(set(received)) == 3
    for rid in received:
        assert order.index(("logged", rid)) < order.index(("received", rid))


def test_unwritable_log_stops_the_release(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / RELEASE_LOG_DIR).write_text("a file where the log folder goes\n")
    with pytest.raises(fedgl.FedglError, match="release was not sent") as err:
        fedgl.run(**BASE, checkpoint_every=2, out=str(out))
    assert "\n" not in str(err.value)


def test_a_torn_log_line_still_counts(tmp_path):
    folder = tmp_path / RELEASE_LOG_DIR
    folder.mkdir()
    rec = {"client": 0, "seed": 0, "release": "aa", "epsilon": 1.0, "delta": 1e-5, "clip": 1.0}
    (folder / "client-0.jsonl").write_text(json.dumps(rec) + "\n" + '{"client": 0, "se')
    assert logged_releases(tmp_path, 0) == {"0": ["aa", "unreadable-line-1"]}
    assert logged_releases(tmp_path, 1) == {"0": ["unreadable-line-1"]}


def test_a_resume_that_stops_checkpointing_still_logs(tmp_path):
    """Resumed with --checkpoint-every 0 the old checkpoint stays; a crash there and a further
    resume from it must still count the crashed attempt's release."""
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        fedgl.run(**BASE, checkpoint_every=2, out=str(out), on_round=interrupt_at(3))
    with pytest.raises(KeyboardInterrupt):
        fedgl.run(resume=out, progress=False, checkpoint_every=0, on_round=interrupt_at(4))
    acc = fedgl.run(resume=out, progress=False).repeats[0].extra["privacy"]["dp"]["accounting"]
    assert acc["releases_per_client"] == {"0": 3, "1": 3, "2": 3}
