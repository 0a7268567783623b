"""``fedgl server``'s guards around the run it submits: one server per --out folder (before
anything is submitted), a busy federation refused in one line, a run that stays pending (its
SuperExec died) or ends before its ServerApp starts reported in one line and stopped."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fedgl.deployment.run_watch import (
    StartWatch,
    busy_line,
    busy_runs,
    hold_server_lock,
    run_id_from,
    start_verdict,
)
from fedgl.errors import ConfigError


def test_a_second_server_with_the_same_out_is_refused_before_submitting(tmp_path: Path) -> None:
    out = tmp_path / "res"
    fd = hold_server_lock(out)
    try:
        with pytest.raises(ConfigError, match="in use by another fedgl server") as err:
            hold_server_lock(out)
        assert f"pid {os.getpid()}" in str(err.value) and "\n" not in str(err.value)
        os.close(hold_server_lock(tmp_path / "other"))   # another --out is free
    finally:
        os.close(fd)
    os.close(hold_server_lock(out))   # free again once the first ended


def _ls(*runs: tuple[str, str]) -> str:
    return json.dumps({"success": True, "runs": [{"run-id": r, "status": s,
                                                   "status-details": ""} for r, s in runs]})


def test_a_busy_federation_is_named_with_its_run() -> None:
    assert busy_runs(_ls(("1", "finished:completed"), ("2", "finished:failed"))) == []
    busy = busy_runs(_ls(("1", "finished:completed"), ("7", "running")))
    assert busy == [("7", "running")]
    line = busy_line("10.0.0.1:9093", busy)
    assert "busy" in line and "flwr stop 7" in line and "\n" not in line
    assert busy_runs("not json") == [] and busy_runs("") == []


def test_the_submitted_run_id_is_read_from_flwr_run() -> None:
    assert run_id_from("...\nSuccessfully started run 4242\n...") == 4242
    assert run_id_from("Loading project configuration...") is None


def test_a_run_pending_past_the_timeout_or_ended_early_is_a_verdict() -> None:
    assert start_verdict("pending", "", 5.0, 30.0) is None
    assert start_verdict("starting", "", 300.0, 30.0) is None
    assert start_verdict("running", "", 300.0, 30.0) is None
    pending = start_verdict("pending", "", 31.0, 30.0)
    assert pending is not None and "SuperLink's log" in pending and "stopped" in pending
    ended = start_verdict("finished:failed", "SuperExec error", 3.0, 30.0)
    assert ended is not None and "SuperExec error" in ended


def test_the_start_watch_stops_a_pending_run_and_aborts(tmp_path: Path) -> None:
    log = tmp_path / "flwr-run.log"
    log.write_text("Successfully started run 9\n")
    stopped: list[int] = []
    aborted: list[bool] = []
    status = {"now": "pending"}
    watch = StartWatch(log, lambda: False, lambda rid: _ls((str(rid), status["now"])),
                       stopped.append, lambda: aborted.append(True), timeout=30.0)
    assert not watch.check(9, 10.0) and watch.problem is None
    assert watch.check(9, 40.0)
    assert stopped == [9] and aborted == [True]
    assert watch.problem is not None and watch.problem.startswith("run 9 is still pending")
    # a run that ended before its ServerApp started is not stopped again, only reported
    status["now"] = "finished:failed"
    again = StartWatch(log, lambda: False, lambda rid: _ls((str(rid), status["now"])),
                       stopped.append, lambda: aborted.append(True))
    assert again.check(9, 1.0) and stopped == [9] and "flwr log 9" in again.problem
    # once the ServerApp started, nothing is judged
    started = StartWatch(log, lambda: True, lambda rid: _ls((str(rid), "pending")),
                         stopped.append, lambda: aborted.append(True), timeout=1.0)
    assert not started.check(9, 100.0)


def test_the_start_watch_reads_the_run_id_and_returns_once_started(tmp_path: Path) -> None:
    log = tmp_path / "flwr-run.log"
    log.write_text("Successfully started run 5\n")
    seen: list[int] = []
    calls = {"n": 0}

    def started() -> bool:
        calls["n"] += 1
        return calls["n"] > 3

    def ls(rid: int) -> str:
        seen.append(rid)
        return _ls((str(rid), "starting"))

    watch = StartWatch(log, started, ls, lambda rid: None, lambda: None, every=0.01)
    watch.watch()
    assert seen and set(seen) == {5} and watch.problem is None
