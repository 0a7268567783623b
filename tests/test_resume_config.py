"""On resume, a checkpoint's config is checked, never trusted for where the run goes: the
transport, cluster address and paths come from the current invocation; a given key that would
change the result is refused in one line naming it."""

from __future__ import annotations

import hashlib
import io

import pytest
import torch

import fedgl
from fedgl.checkpoint import CHECKPOINT_FILE, config_digest, load_checkpoint
from fedgl.cli import main
from fedgl.errors import ConfigError
from tests.helpers import interrupt_at

BASE = dict(dataset="sbm", sbm_nodes=120, clients=2, rounds=4, progress=False)


def _interrupted(out) -> None:
    with pytest.raises(KeyboardInterrupt):
        fedgl.run(**BASE, checkpoint_every=1, out=str(out), on_round=interrupt_at(2))


def _rewrite_config(out, **changes) -> None:
    """Edit the stored config as an attacker with write access to the folder can: digest and
    checksum recomputed, so the checkpoint is otherwise valid."""
    path = out / CHECKPOINT_FILE
    outer = torch.load(path, weights_only=True)
    raw = torch.load(io.BytesIO(outer["payload"].numpy().tobytes()), weights_only=True)
    raw["config"].update(changes)
    raw["config_sha256"] = config_digest(raw["config"])
    buf = io.BytesIO()
    torch.save(raw, buf)
    data = buf.getvalue()
    outer["payload"] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    outer["sha256"] = hashlib.sha256(data).hexdigest()
    torch.save(outer, path)


def test_stored_address_is_never_dialled(tmp_path, monkeypatch):
    from fedgl.federation import ray_runtime

    reference = fedgl.run(**BASE)
    out = tmp_path / "run"
    _interrupted(out)
    _rewrite_config(out, runtime="ray", ray_address="203.0.113.7:6379",
                    data_root=str(tmp_path / "elsewhere"), client_cpus=1.0)
    assert load_checkpoint(out).config["ray_address"] == "203.0.113.7:6379"  # accepted as valid

    def dial(*args, **kwargs):
        raise AssertionError("the checkpoint's Ray address was used")

    monkeypatch.setattr(ray_runtime.RayRuntime, "__init__", dial)
    resumed = fedgl.run(resume=out, progress=False)
    assert resumed.config["runtime"] == "local" and resumed.config["ray_address"] is None
    assert resumed.config["data_root"] is None and resumed.config["out"] == str(out)
    assert resumed.repeats[0].extra["runtime"] == "local"
    assert resumed.repeats[0].history == reference.repeats[0].history


def test_result_keys_that_differ_are_refused_by_name(tmp_path, capsys):
    out = tmp_path / "run"
    _interrupted(out)
    with pytest.raises(ConfigError) as err:
        fedgl.run(resume=out, progress=False, rounds=9, lr=0.1)
    msg = str(err.value)
    assert "\n" not in msg and "rounds (checkpoint 4, given 9)" in msg and "lr" in msg
    assert "progress" not in msg
    capsys.readouterr()
    assert main(["run", "--resume", str(out), "--hidden", "32", "--no-progress"]) == 2
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert len(err_lines) == 1 and "hidden (checkpoint 16, given 32)" in err_lines[0]
    assert (out / CHECKPOINT_FILE).is_file()  # nothing lost: the run still resumes
    with pytest.raises(ConfigError, match="--out"):
        fedgl.run(resume=out, progress=False, out=str(tmp_path / "other"))


def test_equal_result_keys_and_invocation_keys_are_accepted(tmp_path):
    reference = fedgl.run(**BASE)
    out = tmp_path / "run"
    _interrupted(out)
    resumed = fedgl.run(resume=out, progress=False, rounds=4, sbm_nodes=120,
                        threads=1, data_root=str(tmp_path))
    assert resumed.config["data_root"] == str(tmp_path)
    assert resumed.repeats[0].history == reference.repeats[0].history
