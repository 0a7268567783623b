"""Helpers and fixtures for the CLI tests (test_cli.py, test_bad_input.py).

Kept out of conftest.py on purpose. Test modules import the fixtures by their function names
(``cli_fixture``, ``offline_fixture``) and request them as ``cli`` / ``offline``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from fedgl.cli import main

REPO = Path(__file__).resolve().parents[1]

# A tiny SBM run: any case that wrongly starts training still ends in well under a second.
TINY = ["--sbm-nodes", "40", "--sbm-features", "8", "--clients", "2", "--rounds", "1",
        "--no-progress"]


@dataclass
class CliResult:
    code: int
    out: str
    err: str


def shared_data_root() -> Path:
    """$FEDGL_DATA when set, else ../shared/data next to the repository."""
    env = os.environ.get("FEDGL_DATA")
    return Path(env) if env else REPO.parent / "shared" / "data"


@pytest.fixture(name="cli")
def cli_fixture(capsys: pytest.CaptureFixture[str]):
    """``cli(*args)`` runs ``fedgl.cli.main`` in-process and returns code, stdout and stderr."""

    def _run(*args: str | Path) -> CliResult:
        capsys.readouterr()  # drop anything printed before
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return _run


@pytest.fixture(name="offline")
def offline_fixture(monkeypatch: pytest.MonkeyPatch) -> None:
    """No download attempts and no ambient data root."""
    monkeypatch.setenv("FEDGL_OFFLINE", "1")
    monkeypatch.delenv("FEDGL_DATA", raising=False)


def run_subprocess(*args: str | Path, env: dict[str, str] | None = None,
                   timeout: float = 120) -> CliResult:
    """Run ``python -m fedgl.cli ARGS`` as a real process."""
    full_env = {**os.environ, "FEDGL_OFFLINE": "1", **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "fedgl.cli", *map(str, args)], cwd=REPO,
                          env=full_env, capture_output=True, text=True, timeout=timeout)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def assert_user_error(res: CliResult, *keywords: str, out: Path | None = None) -> str:
    """Exit code 2, exactly one ``fedgl: error:`` line on stderr naming the problem, no
    traceback, and (when given) no ``out`` folder. Returns the error line."""
    assert res.code == 2, f"exit code {res.code}, stderr: {res.err!r}"
    assert "Traceback" not in res.err and "Traceback" not in res.out, res.err
    lines = res.err.splitlines()
    assert len(lines) == 1, f"expected one stderr line, got {len(lines)}: {res.err!r}"
    line = lines[0]
    assert line.startswith("fedgl: error: ") and len(line) > len("fedgl: error: "), line
    for word in keywords:
        assert word.lower() in line.lower(), f"{word!r} not in {line!r}"
    if out is not None:
        assert not out.exists(), f"{out} was written despite the error"
    return line
