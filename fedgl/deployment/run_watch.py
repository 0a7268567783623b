"""``fedgl server``'s guards around the run it submits to the SuperLink.

- :func:`hold_server_lock`: one ``fedgl server`` per ``--out`` folder, checked before anything is
  submitted (the ServerApp's own results-folder lock comes only once the SuperLink starts it).
- :func:`busy_runs`: a federation already running another run refuses a second ``fedgl server``
  in one line (a second run would take over the organisations' SuperNodes, and the first then
  fails on messages it never sent), unless it is asked to take the federation over
  (``--take-over``): it then stops the other run on the SuperLink first, and that run's
  ``fedgl server`` ends with one line saying so (:func:`stopped_line`) and how to continue it.
- :class:`StartWatch`: a submitted run that stays ``pending`` (the SuperLink's SuperExec died,
  e.g. against a certificate that does not cover 127.0.0.1) or ends before its ServerApp starts
  is reported in one line within seconds and stopped, instead of ``fedgl server`` waiting past
  ``--join-timeout`` in silence. Flower's own view of the runs is ``flwr ls`` / ``flwr log``.
- :class:`LinkWatch`: while the run goes on, one line when the SuperLink stops accepting
  connections (restarting, or gone) and one when it is back, with how long it was away. A
  SuperLink that restarted ends the run (its SuperExec, and with it the run's ServerApp, ends
  with it; the restarted one refuses the old ServerApp's token): ``fedgl server`` then stops
  the run there if it is still listed, and says how to resume it.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from fedgl.errors import ConfigError

#: the file beside the job's run id file where the ServerApp writes its process id (``fedgl
#: server`` follows the run there where ``flwr run`` loses the SuperLink, a restart)
SERVERAPP_PID = "serverapp.pid"
#: seconds a submitted run may stay ``pending`` before ``fedgl server`` reports it
START_TIMEOUT = 30.0
_STARTED = re.compile(r"Successfully started run (\d+)")


def hold_server_lock(out: Path) -> int:
    """Lock ``.<out>.server.lock`` beside ``out`` for this process's life (the returned file
    descriptor); a second ``fedgl server`` with the same ``--out`` is refused in one line."""
    parent = out.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    path = parent / f".{out.name}.server.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 64).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise ConfigError(f"--out '{out}' is in use by another fedgl server ({holder}); wait "
                          "for it to finish or choose another --out") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()}\n".encode())
    return fd


def run_id_from(text: str) -> int | None:
    """The run id ``flwr run`` printed on submission, if it did."""
    found = _STARTED.search(text)
    return int(found.group(1)) if found else None


def busy_runs(ls_json: str) -> list[tuple[str, str]]:
    """``(run id, status)`` of every run ``flwr ls --format json`` lists as not finished."""
    try:
        runs = json.loads(ls_json).get("runs") or []
    except (ValueError, AttributeError):
        return []
    return [(str(r.get("run-id")), str(r.get("status"))) for r in runs
            if isinstance(r, dict) and not str(r.get("status", "")).startswith("finished")]


def busy_line(superlink: str, busy: list[tuple[str, str]]) -> str:
    """The one line refusing a second run on a busy federation."""
    run_id, status = busy[0]
    return (f"the federation at {superlink} is busy: run {run_id} is {status} (`flwr ls`); "
            f"wait for it to finish, or take it over with --take-over (it stops run {run_id})")


def run_status(run_id_file: Path, ls: Callable[[int], str]) -> str | None:
    """The SuperLink's status of the run whose id is in ``run_id_file`` (``flwr ls``), or None
    when it cannot be known (no id yet, the SuperLink does not answer)."""
    try:
        run_id = int(run_id_file.read_text())
        runs = json.loads(ls(run_id)).get("runs") or []
    except (OSError, ValueError, AttributeError, subprocess.SubprocessError):
        return None
    mine = [r for r in runs if isinstance(r, dict) and str(r.get("run-id")) == str(run_id)]
    return str(mine[0].get("status", "")) if mine else None


def stopped_line(run_id_file: Path, out: Path, ls: Callable[[int], str]) -> str | None:
    """The one line of a ``fedgl server`` whose started run was stopped on the SuperLink by
    someone else (another ``fedgl server --take-over``, or ``flwr stop``), with how to go on:
    ``--resume`` where it checkpointed. None when the run was not stopped that way."""
    if run_status(run_id_file, ls) != "finished:stopped":
        return None
    run_id = int(run_id_file.read_text())
    return (f"run {run_id} was stopped on the SuperLink (another fedgl server took the "
            f"federation over with --take-over, or `flwr stop {run_id}`); "
            f"{how_to_go_on(out, 'once the federation is free')}")


def how_to_go_on(out: Path, when: str) -> str:
    """How a run that ended early goes on: ``--resume`` from its checkpoint in ``out`` (with
    its round), or again from the start."""
    if (out / "checkpoint.pt").is_file():
        from fedgl.checkpoint import load_checkpoint

        try:
            done = load_checkpoint(out).progress
        except Exception:   # noqa: BLE001 - the line names the folder either way
            done = None
        at = f" at round {done.round}" if done is not None else ""
        return (f"its checkpoint{at} is in {out}: continue it with `fedgl server --resume "
                f"{out}` {when}")
    return ("it kept no checkpoint, so start it again (with --checkpoint-every N it can "
            "continue where it stopped)")


def start_verdict(status: str, details: str, pending_for: float, timeout: float
                  ) -> str | None:
    """Why a submitted run whose ServerApp has not started yet is not going to (None: wait)."""
    if status.startswith("finished"):
        why = f" ({details})" if details else ""
        return (f"ended as {status}{why} before its ServerApp started; see the SuperLink's log "
                "(`flwr log RUN_ID` shows the run's own lines)")
    if status == "pending" and pending_for > timeout:
        return (f"is still pending after {pending_for:.0f} s: the SuperLink's SuperExec is not "
                "starting it (see the SuperLink's log; a SuperLink certificate that does not "
                "cover 127.0.0.1 stops its SuperExec: make it with `fedgl certs`); the run was "
                "stopped")
    return None


class StartWatch:
    """Watch a submitted run until its ServerApp starts (``started()`` true); ``ls(run_id)``
    returns ``flwr ls --run-id`` JSON, ``stop(run_id)`` stops it. On a verdict,
    :attr:`problem` holds the one line and ``abort()`` ends ``flwr run``."""

    def __init__(self, log: Path, started: Callable[[], bool], ls: Callable[[int], str],
                 stop: Callable[[int], None], abort: Callable[[], None],
                 timeout: float = START_TIMEOUT, every: float = 2.0) -> None:
        self.log, self.started, self.ls, self.stop, self.abort = log, started, ls, stop, abort
        self.timeout, self.every = timeout, every
        self.problem: str | None = None
        self.done = threading.Event()

    def check(self, run_id: int, pending_for: float) -> bool:
        """One look at the run; True when a verdict was reached (and acted on)."""
        try:
            runs = json.loads(self.ls(run_id)).get("runs") or []
        except (ValueError, AttributeError, OSError, subprocess.SubprocessError):
            return False
        mine = [r for r in runs if isinstance(r, dict) and str(r.get("run-id")) == str(run_id)]
        if not mine or self.started():
            return False
        verdict = start_verdict(str(mine[0].get("status", "")),
                                str(mine[0].get("status-details") or ""), pending_for,
                                self.timeout)
        if verdict is None:
            return False
        self.problem = f"run {run_id} {verdict}".replace("RUN_ID", str(run_id))
        if not verdict.startswith("ended"):
            self.stop(run_id)
        self.abort()
        return True

    def watch(self) -> None:
        """Until the ServerApp starts or ``done`` is set (``flwr run`` ended)."""
        begun = time.monotonic()
        run_id = None
        while not self.done.wait(self.every):
            if self.started():
                return
            if run_id is None:
                try:
                    run_id = run_id_from(self.log.read_text(errors="replace"))
                except OSError:
                    run_id = None
                if run_id is None:
                    continue
            if self.check(run_id, time.monotonic() - begun):
                return

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.watch, daemon=True)
        thread.start()
        return thread


class LinkWatch:
    """Say when the SuperLink at ``address`` stops answering and when it is back (``say``
    gets each line). ``reachable()``: whether a connection to it succeeds now; two failures in
    a row (``every`` seconds apart) make it away, one success back."""

    def __init__(self, address: str, reachable: Callable[[], bool], say: Callable[[str], None],
                 every: float = 2.0) -> None:
        self.address, self.reachable, self.say, self.every = address, reachable, say, every
        self.failures = 0
        self.away_since: float | None = None
        self.was_away = False   # whether it went away at some point of the run
        self.done = threading.Event()

    def step(self, now: float) -> None:
        """One look at the SuperLink at time ``now`` (monotonic seconds)."""
        if self.reachable():
            if self.away_since is not None:
                self.say(f"the SuperLink at {self.address} is back after "
                         f"{now - self.away_since:.0f} s")
            self.failures, self.away_since = 0, None
            return
        self.failures += 1
        if self.failures == 2 and self.away_since is None:
            self.away_since = now - self.every
            self.was_away = True
            self.say(f"the SuperLink at {self.address} does not answer (restarting, or gone; "
                     "see its log); a restart of the SuperLink ends the run (Flower's SuperExec "
                     "ends with it): fedgl server then says how to resume it")

    def watch(self) -> None:
        while not self.done.wait(self.every):
            self.step(time.monotonic())

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.watch, daemon=True)
        thread.start()
        return thread


def tcp_reachable(address: str, timeout: float = 1.0) -> bool:
    """Whether a TCP connection to ``HOST:PORT`` succeeds now."""
    import socket

    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
        return True
    except (OSError, ValueError):
        return False


def flwr_json(flwr: str, env: dict[str, str], *args: str) -> str:
    """``flwr ARGS --format json`` against the connection ``fedgl``; its stdout."""
    done = subprocess.run([flwr, *args, "fedgl", "--format", "json"], env=env,
                          capture_output=True, text=True, timeout=30, check=False)
    return done.stdout
