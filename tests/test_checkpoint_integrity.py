"""A checkpoint is versioned, checksummed and bound to its config: a damaged, edited or
inconsistent file is a one-line error naming what differs, and nothing is written."""

from __future__ import annotations

import hashlib
import io
import json
import re

import pytest
import torch

import fedgl
from fedgl.checkpoint import CHECKPOINT_FILE, FORMAT, VERSION, config_digest, load_checkpoint
from fedgl.cli import main
from fedgl.errors import DataError
from tests.helpers import interrupt_at

BASE = dict(dataset="sbm", sbm_nodes=300, clients=3, rounds=6, progress=False)


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """A run stopped at round 3 with a checkpoint every round."""
    out = tmp_path_factory.mktemp("ckpt") / "run"

    stop = interrupt_at(3)

    with pytest.raises(KeyboardInterrupt):
        fedgl.run(**BASE, checkpoint_every=1, out=str(out), on_round=stop)
    return (out / CHECKPOINT_FILE).read_bytes()


def _payload(blob: bytes) -> dict:
    outer = torch.load(io.BytesIO(blob), weights_only=True)
    return torch.load(io.BytesIO(outer["payload"].numpy().tobytes()), weights_only=True)


def _pack(payload: dict, *, version: int = VERSION, sha: str | None = None) -> bytes:
    inner = io.BytesIO()
    torch.save(payload, inner)
    data = inner.getvalue()
    out = io.BytesIO()
    torch.save({"format": FORMAT, "version": version,
                "sha256": sha or hashlib.sha256(data).hexdigest(),
                "payload": torch.frombuffer(bytearray(data), dtype=torch.uint8)}, out)
    return out.getvalue()


def _resigned(payload: dict) -> bytes:
    """A payload edited consistently: config digest and checksum recomputed."""
    return _pack({**payload, "config_sha256": config_digest(payload["config"])})


def _cases(good: bytes) -> dict[str, tuple[bytes, str]]:
    p = _payload(good)
    edited = {**p, "config": {**p["config"], "rounds": 60}}
    flipped = bytearray(good)
    flipped[len(flipped) // 2] ^= 0xFF
    later = {**p, "progress": {**p["progress"], "round": 50}, "config": {**p["config"],
                                                                          "rounds": 10}}
    weights = dict(p["progress"]["weights"])
    name = next(iter(weights))
    weights[name] = torch.zeros(*[s + 1 for s in weights[name].shape])
    other_model = {**p, "progress": {**p["progress"], "weights": weights}}
    more_clients = {**p, "config": {**p["config"], "clients": 2}}
    return {
        "random bytes": (bytes(range(256)) * 8, "unreadable|not a fedgl checkpoint"),
        "a text file": (b"hello, I am not a checkpoint\n", "unreadable|not a fedgl checkpoint"),
        "result.json": (json.dumps({"config": {}, "repeats": []}).encode(),
                        "unreadable|not a fedgl checkpoint"),
        "a flipped byte": (bytes(flipped), "checksum|unreadable"),
        "an edited config": (_pack(edited), "does not match the digest"),
        "another format version": (_pack(p, version=VERSION + 1), "format version"),
        "a wrong checksum": (_pack(p, sha="0" * 64), "fails its checksum"),
        "round 50 of a 10-round run": (_resigned(later), "round 50 of a 10-round run"),
        "another client count": (_resigned(more_clients), "beyond its 2 clients"),
        "another model size": (_resigned(other_model), f"'{name}' is"),
    }


@pytest.mark.parametrize("case", ["random bytes", "a text file", "result.json", "a flipped byte",
                                  "an edited config", "another format version",
                                  "a wrong checksum", "round 50 of a 10-round run",
                                  "another client count", "another model size"])
def test_bad_checkpoint_is_one_line_and_writes_nothing(case, interrupted, tmp_path, capsys):
    blob, words = _cases(interrupted)[case]
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / CHECKPOINT_FILE).write_bytes(blob)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert main(["run", "--resume", str(folder), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fedgl: error:"), err
    assert re.search(words, err[0]), err[0]
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    assert (folder / CHECKPOINT_FILE).read_bytes() == blob


def test_good_checkpoint_loads_and_resumes(interrupted, tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / CHECKPOINT_FILE).write_bytes(interrupted)
    ckpt = load_checkpoint(folder)
    assert ckpt.progress.round == 3 and ckpt.config["rounds"] == 6
    resumed = fedgl.run(resume=folder, progress=False)
    assert len(resumed.repeats[0].history) == 6


def test_payload_without_its_digest_is_refused(interrupted, tmp_path):
    p = _payload(interrupted)
    del p["config_sha256"]
    path = tmp_path / CHECKPOINT_FILE
    path.write_bytes(_pack(p))
    with pytest.raises(DataError, match="unreadable"):
        load_checkpoint(path)
