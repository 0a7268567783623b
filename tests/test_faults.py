"""Faults around a run: two runs on one folder, a full disk, kill -9 and resume, Ctrl-C.

A results folder is complete or absent, never half-written; a killed run leaves a checkpoint
that resumes; errors are one line without a traceback.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fedgl
from fedgl.cli import main
from fedgl.errors import OutputError
from tests._cli_helpers import REPO

SMALL = ["--sbm-nodes", "60", "--sbm-features", "4", "--clients", "2", "--no-progress"]


def _spawn(*args: str | Path) -> subprocess.Popen[str]:
    env = {**os.environ, "FEDGL_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "fedgl.cli", *map(str, args)], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"process ended early: {proc.communicate()}"
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.005)


def _leftovers(parent: Path, name: str) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{name}."))


def test_concurrent_runs_on_one_folder(tmp_path, capsys):
    """While one run holds --out, a second is refused at once; the first completes whole."""
    out = tmp_path / "shared"
    first = _spawn("run", *SMALL, "--rounds", "30", "--out", out)
    lock = tmp_path / ".shared.lock"
    _wait_for(lock, first)
    while b"pid" not in lock.read_bytes():   # written once the lock is held
        time.sleep(0.005)
    os.kill(first.pid, signal.SIGSTOP)   # keep it holding the folder while the second starts
    try:
        code = main(["run", *SMALL, "--rounds", "2", "--out", str(out)])
        err = capsys.readouterr().err.strip().splitlines()
    finally:
        os.kill(first.pid, signal.SIGCONT)
    assert code == 2 and len(err) == 1 and "in use by another fedgl run" in err[0], err
    assert first.wait(timeout=120) == 0, first.communicate()
    result = json.loads((out / "result.json").read_text())
    assert result["config"]["rounds"] == 30
    assert len((out / "history.csv").read_text().splitlines()) == 1 + 30
    assert sorted(p.name for p in out.iterdir()) == ["history.csv", "model", "result.json"]
    assert _leftovers(tmp_path, "shared") == []


@pytest.fixture
def tiny_disk(tmp_path):
    """A 64 KiB tmpfs, filled to leave ``free`` bytes (root with mount rights only)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                       check=True, capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        pytest.skip("cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN)")

    def fill(free: int) -> None:
        st = os.statvfs(mnt)
        size = st.f_bavail * st.f_frsize - free
        with open(mnt / "filler", "wb") as f:
            f.write(b"\0" * max(size, 0))

    try:
        yield mnt, fill
    finally:
        import gc

        gc.collect()   # a failed torch.save may leave its file open until collected
        if subprocess.run(["umount", str(mnt)], capture_output=True, timeout=10).returncode:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=10)


def test_disk_full_leaves_nothing_partial(tiny_disk, capsys):
    mnt, fill = tiny_disk
    fill(4096)   # the result set (≈ 8 KB) does not fit
    before = sorted(p.name for p in mnt.iterdir())
    code = main(["run", *SMALL, "--rounds", "2", "--out", str(mnt / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "No space left on device" in err[0] and "free some space" in err[0]
    assert sorted(p.name for p in mnt.iterdir()) == before   # no folder, no staging, no lock


def test_disk_full_during_checkpointing(tiny_disk, capsys):
    mnt, fill = tiny_disk
    fill(8192)   # room for the lock file and the folders, not for a checkpoint
    code = main(["run", *SMALL, "--rounds", "3", "--checkpoint-every", "1",
                 "--out", str(mnt / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "No space left on device" in err[0], err
    assert sorted(p.name for p in mnt.iterdir()) == ["filler"]


def test_kill_9_then_resume(tmp_path):
    """A run killed with SIGKILL leaves its checkpoint (and no results); --resume finishes it
    into a complete folder with no leftovers, equal to an uninterrupted run."""
    out = tmp_path / "run"
    args = [*SMALL, "--rounds", "40", "--checkpoint-every", "1"]
    proc = _spawn("run", *args, "--out", out)
    _wait_for(out / "checkpoint.pt", proc)
    proc.kill()
    proc.wait(timeout=30)
    assert not (out / "result.json").exists()
    assert main(["run", "--resume", str(out), "--no-progress"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["history.csv", "model", "result.json"]
    assert _leftovers(tmp_path, "run") == []
    resumed = fedgl.RunResult.load(out)
    reference = fedgl.run(sbm_nodes=60, sbm_features=4, clients=2, rounds=40, progress=False)
    assert [h["round"] for h in resumed.repeats[0].history] == list(range(1, 41))
    assert resumed.repeats[0].final["test_acc"] == pytest.approx(
        reference.repeats[0].final["test_acc"])


def test_divergence_keeps_the_last_checkpoint(tmp_path, capsys):
    """A run that diverges stops with one line; the checkpoint before it stays and resumes to
    the same error (the divergence is in the configuration, not a fluke)."""
    out = tmp_path / "run"
    code = main(["run", *SMALL, "--sbm-nodes", "200", "--rounds", "10", "--lr", "1e4",
                 "--checkpoint-every", "1", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "diverged at round" in err[0], err
    diverged_at = int(err[0].split("diverged at round ")[1].split(":")[0])
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint.pt"]
    from fedgl.checkpoint import load_checkpoint

    assert load_checkpoint(out).progress.round == diverged_at - 1
    assert main(["run", "--resume", str(out), "--no-progress"]) == 2
    assert f"diverged at round {diverged_at}" in capsys.readouterr().err


def test_allow_divergence_records_it(tmp_path):
    res = fedgl.run(sbm_nodes=200, sbm_features=4, clients=2, rounds=10, lr=1e4, sbm_noise=1e6,
                    allow_divergence=True, progress=False, out=str(tmp_path / "o"))
    rep = res.repeats[0]
    assert rep.extra["diverged"]["round"] == rep.final["diverged_round"] == len(rep.history)
    assert res.summary["diverged"]["values"] == [0]
    saved = json.loads((tmp_path / "o" / "result.json").read_text())
    assert saved["summary"]["diverged"]["mean"] == 1.0


@pytest.mark.parametrize("delay", [0.3, 1.5, 4.0])
def test_ctrl_c_at_start_up(tmp_path, delay):
    """SIGINT while the command loads or starts: one line, exit 130, nothing written."""
    proc = _spawn("run", *SMALL, "--rounds", "2000", "--out", tmp_path / "o")
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_umask_is_honoured(tmp_path):
    old = os.umask(0o027)
    try:
        fedgl.run(sbm_nodes=60, sbm_features=4, clients=2, rounds=1, progress=False,
                  out=str(tmp_path / "o"))
    finally:
        os.umask(old)
    assert (tmp_path / "o").stat().st_mode & 0o777 == 0o750
    for name in ("result.json", "history.csv"):
        assert (tmp_path / "o" / name).stat().st_mode & 0o777 == 0o640


def test_overwrite_replaces_whole_folder(tmp_path):
    out = tmp_path / "o"
    fedgl.run(sbm_nodes=60, sbm_features=4, clients=2, rounds=1, progress=False, out=str(out))
    with pytest.raises(OutputError, match="--overwrite"):
        fedgl.run(sbm_nodes=60, sbm_features=4, clients=2, rounds=2, progress=False,
                  out=str(out))
    fedgl.run(sbm_nodes=60, sbm_features=4, clients=2, rounds=2, progress=False, out=str(out),
              overwrite=True)
    assert json.loads((out / "result.json").read_text())["config"]["rounds"] == 2
    assert _leftovers(tmp_path, "o") == []


def test_read_only_mount_is_refused_before_training(tmp_path, capsys):
    mnt = tmp_path / "ro"
    mnt.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,ro", "tmpfs", str(mnt)],
                       check=True, capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        pytest.skip("cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN)")
    rounds: list[int] = []
    try:
        with pytest.raises(OutputError, match="Read-only file system"):
            fedgl.run(sbm_nodes=60, sbm_features=4, clients=2, rounds=2, progress=False,
                      out=str(mnt / "run" / "x"), on_round=lambda r, t, s: rounds.append(t))
        assert rounds == [] and list(mnt.iterdir()) == []
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=10)
