"""The ``fedgl`` program ends a finished run at once (fedgl.cli._exit_now): after its exit
handlers and with its output flushed; a caller of ``main(argv)`` gets the code back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from fedgl.cli import main

REPO = Path(__file__).resolve().parents[1]
ARGS = ["run", "--dataset", "sbm", "--sbm-nodes", "120", "--clients", "3", "--rounds", "2",
        "--no-progress"]


def _program(code: str, out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", code, *ARGS, "--out", str(out)], env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_program_writes_everything_and_runs_its_exit_handlers(tmp_path):
    marker = tmp_path / "handler-ran"
    code = ("import atexit, sys\n"
            f"atexit.register(lambda: open({str(marker)!r}, 'w').close())\n"
            "from fedgl.cli import main\n"
            "sys.argv[0] = 'fedgl'\n"
            "main()\n"
            "raise SystemExit('main() returned: the run did not end the process')\n")
    done = _program(code, tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert "results written to" in done.stdout           # flushed before the end
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert len(result["repeats"][0]["history"]) == 2
    assert marker.exists()


def test_a_running_thread_gets_the_ordinary_exit(tmp_path):
    code = ("import sys, threading, time\n"
            "from fedgl.cli import main\n"
            "threading.Thread(target=time.sleep, args=(0.5,), daemon=False).start()\n"
            "main()\n"
            "print('unreachable')\n")
    done = _program(code, tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert "unreachable" not in done.stdout
    assert (tmp_path / "out" / "result.json").is_file()


def test_a_caller_of_main_gets_the_exit_code(tmp_path):
    assert main([*ARGS, "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "history.csv").is_file()


def test_a_stopped_client_ends_with_its_own_last_line(tmp_path):
    """``fedgl client`` ends as a run does: its own line stays the last one, whatever the
    interpreter's teardown of threads would print (here: a teardown hook that speaks)."""
    code = ("import sys, threading\n"
            "import torch  # noqa: F401 - as a client that has loaded its party\n"
            "threading._register_atexit(lambda: print('teardown spoke', file=sys.stderr))\n"
            "from fedgl.cli import main\n"
            "sys.argv[0] = 'fedgl'\n"
            "main()\n"
            "raise SystemExit('main() returned: the client did not end the process')\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code, "client", "--data",
                           str(tmp_path / "missing.json"), "--key", "k", "--roster", "r",
                           "--superlink", "127.0.0.1:1"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "teardown spoke" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("fedgl: error: give either"), \
        done.stderr
