"""The scratch folders of ``fedgl client`` and ``fedgl server`` never outlive them: removed on
every way out the process sees (return, error, Ctrl-C, SIGTERM, SIGHUP), and after SIGKILL by
the next command of the same kind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedgl.deployment.scratch import OWNER, scratch_folder, sweep

CHILD = """
import sys, time
from pathlib import Path
from fedgl.deployment.scratch import scratch_folder, terminate_as_interrupt
try:
    with scratch_folder("fedgl-test-", Path(sys.argv[1])) as f, terminate_as_interrupt():
        print(f, flush=True)
        time.sleep(60)
except KeyboardInterrupt:
    sys.exit(130)
"""


def _child(parent: Path) -> tuple[subprocess.Popen, Path]:
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(parent)], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(Path.cwd())})
    folder = Path(proc.stdout.readline().strip())
    assert folder.is_dir() and (folder / OWNER).is_file()
    return proc, folder


def test_removed_on_return_and_on_error(tmp_path: Path) -> None:
    with scratch_folder("fedgl-test-", tmp_path) as folder:
        assert folder.stat().st_mode & 0o777 == 0o700
        (folder / "party.sock").write_text("x")
    assert not folder.exists()
    with pytest.raises(RuntimeError), scratch_folder("fedgl-test-", tmp_path) as folder:
        raise RuntimeError("boom")
    assert not folder.exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_removed_when_the_command_is_terminated(tmp_path: Path, sig: int) -> None:
    proc, folder = _child(tmp_path)
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == 130
    assert not folder.exists()


def test_after_sigkill_the_next_command_removes_it_and_keeps_a_running_ones(
        tmp_path: Path) -> None:
    killed, stale = _child(tmp_path)
    alive, running = _child(tmp_path)
    try:
        killed.kill()
        killed.wait(timeout=30)
        assert stale.is_dir()   # nothing could run in the killed process
        (tmp_path / "fedgl-test-notours").mkdir()   # no owner file: never touched
        with scratch_folder("fedgl-test-", tmp_path) as mine:
            assert not stale.exists()
            assert running.is_dir() and mine.is_dir()
            assert (tmp_path / "fedgl-test-notours").is_dir()
        assert sweep("fedgl-test-", tmp_path) == []
    finally:
        alive.terminate()
        alive.wait(timeout=30)
    deadline = time.monotonic() + 10
    while running.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running.exists()
