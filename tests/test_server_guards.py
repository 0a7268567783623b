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
    stopped_line,
)
from fedgl.errors import ConfigError
from tests.flower_helpers import needs_flwr


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
    assert "busy" in line and "--take-over" in line and "\n" not in line
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


def test_a_run_stopped_by_another_is_one_line_with_how_to_go_on(tmp_path: Path) -> None:
    """The first ``fedgl server`` of a federation another one took over: one line naming its
    run, the cause, and ``--resume`` where it checkpointed; nothing when its run was not
    stopped that way."""
    rid = tmp_path / "run_id"
    rid.write_text("7")
    out = tmp_path / "out"
    out.mkdir()
    assert stopped_line(rid, out, lambda r: _ls(("7", "finished:failed"))) is None
    assert stopped_line(rid, out, lambda r: _ls(("8", "finished:stopped"))) is None
    assert stopped_line(tmp_path / "none", out, lambda r: _ls(("7", "finished:stopped"))) is None
    line = stopped_line(rid, out, lambda r: _ls(("7", "finished:stopped")))
    assert line is not None and "\n" not in line and "--take-over" in line
    assert "no checkpoint" in line and "--checkpoint-every" in line
    (out / "checkpoint.pt").write_bytes(b"not a checkpoint")   # unreadable: still one line
    line = stopped_line(rid, out, lambda r: _ls(("7", "finished:stopped")))
    assert line is not None and f"fedgl server --resume {out}" in line and "\n" not in line


@needs_flwr
@pytest.mark.slow
def test_a_second_server_takes_the_federation_over_only_when_asked(tmp_path: Path,
                                                                    data_root: Path) -> None:
    """A loopback federation busy with a checkpointing run: a second ``fedgl server`` is
    refused in one line; with ``--take-over`` it stops the first run and runs its own, and the
    first ``fedgl server`` ends with one line saying so and how to continue (``--resume``)."""
    import subprocess

    from fedgl.deployment.loopback import Loopback
    from tests.flower_helpers import PLAINTEXT, RUN, server_cmd, wait_for, write_deployment_files

    root = write_deployment_files(tmp_path)
    first_out, second_out = root / "out-first", root / "out-second"
    with Loopback(root / "fed", root / "shards", root / "keys", 3, PLAINTEXT) as fed:
        first = subprocess.Popen(server_cmd(root, fed, first_out, {**RUN, "rounds": 500,
                                                                    "checkpoint_every": 1}),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: (first_out / "checkpoint.pt").is_file(), first)
            refused = subprocess.run(server_cmd(root, fed, second_out, {**RUN, "rounds": 1}),
                                     capture_output=True, text=True, timeout=300, check=False)
            second = subprocess.run([*server_cmd(root, fed, second_out, {**RUN, "rounds": 1}),
                                     "--take-over"], capture_output=True, text=True,
                                    timeout=600, check=False)
            _, err = first.communicate(timeout=300)
        finally:
            if first.poll() is None:
                first.kill()
                first.wait()
    assert refused.returncode == 2 and "is busy" in refused.stderr, refused.stderr[-1000:]
    assert second.returncode == 0, second.stderr[-2000:]
    assert "taking the federation over" in second.stdout + second.stderr
    assert first.returncode != 0
    last = err.strip().splitlines()[-1]
    assert "was stopped on the SuperLink" in last and f"--resume {first_out}" in last, err[-1500:]


def test_a_superlink_that_stops_answering_is_one_line_and_its_return_another() -> None:
    """Two failed connections in a row: one line naming the SuperLink; one success: one line
    with how long it was away; nothing while it answers, nothing twice."""
    from fedgl.deployment.run_watch import LinkWatch

    answers = iter([True, False, True, False, False, False, False, True, True])
    said: list[str] = []
    watch = LinkWatch("10.0.0.1:9093", lambda: next(answers), said.append, every=2.0)
    for t in range(9):
        watch.step(2.0 * t)
    assert len(said) == 2 and watch.was_away, said
    assert "10.0.0.1:9093 does not answer" in said[0] and "\n" not in said[0]
    assert said[1].startswith("the SuperLink at 10.0.0.1:9093 is back after 8 s")


@needs_flwr
@pytest.mark.slow
def test_a_second_node_with_the_same_identity_is_told_it_is_not_admitted(tmp_path: Path,
                                                                        data_root: Path
                                                                        ) -> None:
    """Two ``fedgl client``s with client 1's shard and identity key (two SuperNodes): the run
    goes on with the node that proved it first, and the other's ``fedgl client`` says in one
    line that it was not admitted, instead of sitting idle."""
    import subprocess

    from fedgl.deployment.loopback import Loopback
    from tests.flower_helpers import PLAINTEXT, RUN, server_cmd, write_deployment_files

    root = write_deployment_files(tmp_path)
    out = root / "out"
    with Loopback(root / "fed", root / "shards", root / "keys", 3, PLAINTEXT) as fed:
        fed.start_client(1, "twin")
        import time

        time.sleep(10)   # the twin's SuperNode joins too
        proc = subprocess.run(server_cmd(root, fed, out, {**RUN, "rounds": 1}),
                              capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = [(root / "fed" / f"{name}.log").read_text() for name in ("client-1", "twin")]
    told = [s for s in said if "did not admit this node" in s]
    assert len(told) == 1, [s[-800:] for s in said]
    assert "same identity key" in told[0]
    log = (out / "server.log").read_text()
    assert "client 1 is already node" in log


def _fake_flwr(folder: Path, code: int, said: str) -> Path:
    """A ``flwr`` that records its arguments in ``folder/calls``, says ``said`` on stderr and
    exits with ``code``."""
    script = folder / "flwr"
    script.write_text(f"#!/bin/sh\necho \"$@\" >> '{folder / 'calls'}'\necho \"{said}\" >&2\n"
                      f"exit {code}\n")
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("case", ["pending", "started", "refused", "no-id"])
def test_an_interrupted_server_stops_its_run_or_says_how(tmp_path: Path, monkeypatch,
                                                         case: str) -> None:
    """Ctrl-C / SIGTERM on ``fedgl server``: the run still pending (no ServerApp, so no
    ``run_id`` file) is stopped by the id ``flwr run`` printed, at once; a started one by the
    ServerApp's; "stopped on the SuperLink" only where ``flwr stop`` succeeded, else one clause
    naming the run and the ``flwr stop`` to run; no id at all: nothing claimed."""
    import subprocess
    import time

    from fedgl.deployment import commands

    work = tmp_path / "work"
    work.mkdir()
    flwr = _fake_flwr(tmp_path, 1 if case == "refused" else 0,
                      "Run 77 couldn't be stopped." if case == "refused" else "stopped")
    monkeypatch.setattr(commands, "_flower_bin", lambda name: str(flwr))
    if case != "no-id":
        (work / "flwr-run.log").write_text("Loading project configuration...\n"
                                           "Successfully started run 77\n")
    if case == "started":
        (work / "run_id").write_text("77")
    proc = subprocess.Popen(["sleep", "60"] if case != "no-id" else ["true"],
                            start_new_session=True)   # flwr run, streaming
    if case == "no-id":
        proc.wait()
    begun = time.monotonic()
    said = commands._stop_run(work, tmp_path / "home", proc)
    assert time.monotonic() - begun < 5 and proc.poll() is not None
    calls = (tmp_path / "calls").read_text().splitlines() if case != "no-id" else []
    assert "\n" not in said
    if case == "no-id":
        assert not (tmp_path / "calls").exists() and "stopped on the SuperLink" not in said
        assert "no run id" in said and "flwr ls" in said
        return
    assert calls == ["stop 77 fedgl"]
    if case == "refused":
        assert "stopped on the SuperLink" not in said
        assert said.startswith("run 77 may still be on the SuperLink") and "flwr stop 77" in said
        assert "couldn't be stopped" in said
    else:
        assert said == "run 77 was stopped on the SuperLink"


def test_the_interrupted_line_claims_a_stop_only_where_one_was_made(tmp_path: Path,
                                                                     monkeypatch, capsys) -> None:
    """The CLI's one line (exit 130) ends with what became of the run, as ``fedgl server``
    reported it; an interrupt before anything was submitted claims nothing of the SuperLink."""
    from fedgl.cli import main
    from fedgl.deployment import commands
    from fedgl.errors import ServerInterrupted
    from fedgl.privacy.identity import write_keys

    write_keys(tmp_path / "keys", 3)
    flags = ["server", "--superlink", "127.0.0.1:9", "--insecure", "--roster",
             str(tmp_path / "keys" / "roster.json"), "--clients", "3", "--no-progress",
             "--out", str(tmp_path / "out")]
    for raised, expected in ((ServerInterrupted("run 5 may still be on the SuperLink (flwr "
                                                "stop failed: x): stop it with `flwr stop 5` "
                                                "against the SuperLink"), "flwr stop 5"),
                             (KeyboardInterrupt(), None)):
        def interrupted(cfg, args, raised=raised):
            raise raised

        monkeypatch.setattr(commands, "cmd_server", interrupted)
        assert main(flags) == 130
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("fedgl: interrupted"), err
        assert "was stopped on the SuperLink" not in err[0]
        if expected:
            assert expected in err[0]
        else:
            assert "SuperLink" not in err[0]
