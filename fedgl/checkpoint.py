"""Checkpoints: resumable server-side state of a run, written atomically.

A checkpoint holds the config, the repeats already finished, and for the repeat in progress the
last completed round, the global model, the history so far, the ledger so far, the failure
events, the RNG states and, for algorithms that keep it (the mini-batch FedSGD server's Adam
state and counters), the server's own state as plain data. Clients need no checkpoint: FedAvg
sends them the global model every round, their dropout is seeded per (seed, client, round), and
their pre-training state is rebuilt by re-running the (deterministic) pre-training exchange on
resume.

A checkpoint holds only tensors and plain data (dicts, lists, tuples, str, int, float, bool,
None) and is read with ``torch.load(weights_only=True)``, so a crafted file cannot run code: the
RNG states are stored as a tensor and lists, and anything else is refused with a one-line
:class:`~fedgl.errors.DataError`.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import pickle
import random
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedgl.errors import ConfigError, DataError
from fedgl.output import apply_umask, describe_os_error
from fedgl.results import RepeatResult

CHECKPOINT_FILE = "checkpoint.pt"
FORMAT = "fedgl-checkpoint"
VERSION = 2


# Where and how a run executes, never what it computes: on resume these come from the current
# invocation only (its flags, else the defaults). A checkpoint's transport, cluster address and
# paths are never used, so a checkpoint cannot make a resumed run dial or read anything.
INVOCATION_KEYS = frozenset({"runtime", "ray_address", "client_cpus", "client_gpus",
                             "data_root", "out"})
# Keys that change neither the result nor where it runs: the stored value unless the invocation
# gives one.
FREE_KEYS = frozenset({"progress", "threads", "batch_clients", "checkpoint_every",
                       "on_client_failure", "max_client_restarts"})


def resume_config(stored: dict[str, Any], given: dict[str, Any], folder: str | Path
                  ) -> dict[str, Any]:
    """The config a resumed run uses: the checkpoint's keys that change the result, checked
    against those the invocation gives (a difference is refused in one line naming the keys),
    plus the invocation's transport, addresses and paths (the checkpoint's are dropped unread)
    and ``out`` = ``folder``."""
    from fedgl.config import Config

    if given.get("out") is not None and Path(str(given["out"])) != Path(folder):
        raise ConfigError(f"--out '{given['out']}' is not the resumed folder '{folder}'; drop "
                          "--out (a resumed run writes into the folder it resumes)")
    kept = {k: v for k, v in stored.items() if k not in INVOCATION_KEYS}
    chosen = {k: v for k, v in given.items() if k in INVOCATION_KEYS | FREE_KEYS}
    result_keys = {k: v for k, v in given.items() if k not in INVOCATION_KEYS | FREE_KEYS}
    if result_keys:
        was = Config.from_dict(kept).to_dict()
        now = Config.from_dict({**kept, **result_keys}).to_dict()
        differ = sorted(k for k in set(was) | set(now)
                        if k not in INVOCATION_KEYS | FREE_KEYS and was.get(k) != now.get(k))
        if differ:
            listed = ", ".join(f"{k} (checkpoint {was.get(k)!r}, given {now.get(k)!r})"
                               for k in differ)
            raise ConfigError(f"--resume continues the checkpointed run with its own config, "
                              f"and these keys would change its result: {listed}; drop them, "
                              "or start a new run in another --out folder")
    return {**kept, **chosen, "out": str(folder)}


def config_digest(config: dict[str, Any]) -> str:
    """SHA-256 of a config's canonical JSON (keys sorted): what the checkpoint was written for."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


@dataclass
class RepeatProgress:
    """The state of one repeat after ``round`` completed rounds."""

    repeat: int
    seed: int
    round: int
    weights: dict[str, torch.Tensor]
    history: list[dict]
    ledger: dict
    events: list[dict] = field(default_factory=list)
    dp_releases: dict[str, list[str]] = field(default_factory=dict)  # DP accounting so far
    server: dict[str, Any] = field(default_factory=dict)  # algorithm state beyond the weights


@dataclass
class Checkpoint:
    config: dict[str, Any]
    completed: list[dict[str, Any]]
    progress: RepeatProgress | None
    rng: dict[str, Any]

    def completed_repeats(self) -> list[RepeatResult]:
        return [RepeatResult(**r) for r in self.completed]


class Checkpointer:
    """Writes ``<out>/checkpoint.pt`` every ``every`` rounds and after every finished repeat."""

    def __init__(self, out_dir: str | Path, config: dict[str, Any], every: int,
                 completed: list[RepeatResult] | None = None) -> None:
        self.path = Path(out_dir) / CHECKPOINT_FILE
        self.config = config
        self.every = every
        self.completed = list(completed or [])

    def round_done(self, progress: RepeatProgress) -> None:
        if self.every and progress.round % self.every == 0:
            self._write(progress)

    def repeat_done(self, result: RepeatResult) -> None:
        self.completed.append(result)
        if self.every:
            self._write(None)

    def finish(self) -> None:
        """The run ended and its results are written: the checkpoint is no longer needed."""
        self.path.unlink(missing_ok=True)

    def _write(self, progress: RepeatProgress | None) -> None:
        ckpt = Checkpoint(self.config, [asdict(r) for r in self.completed], progress, rng_state())
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".checkpoint.", suffix=".tmp")
        os.close(fd)
        try:
            payload = io.BytesIO()
            torch.save(plain({**asdict(ckpt), "config_sha256": config_digest(self.config)}),
                       payload)
            data = payload.getvalue()
            torch.save({"format": FORMAT, "version": VERSION,
                        "sha256": hashlib.sha256(data).hexdigest(),
                        "payload": torch.frombuffer(bytearray(data), dtype=torch.uint8)}, tmp)
            apply_umask(tmp)
            os.replace(tmp, self.path)
        except (OSError, RuntimeError) as exc:   # torch.save reports a full disk as RuntimeError
            if not isinstance(exc, OSError):
                st = os.statvfs(self.path.parent)
                full = st.f_bavail * st.f_frsize < 1 << 20
                exc = OSError(errno.ENOSPC if full else errno.EIO,
                              os.strerror(errno.ENOSPC) if full else str(exc).splitlines()[0])
            raise describe_os_error(exc, f"checkpoint '{self.path}'",
                                    "choose a writable --out folder") from None
        finally:
            Path(tmp).unlink(missing_ok=True)


def load_checkpoint(folder: str | Path) -> Checkpoint:
    """Read a checkpoint written by :class:`Checkpointer`: format and version checked, payload
    checksum verified, the stored config's digest recomputed, and the progress checked against
    that config. Anything else is a one-line error naming what differs."""
    path = Path(folder)
    path = path / CHECKPOINT_FILE if path.is_dir() else path
    if not path.is_file():
        raise ConfigError(f"no checkpoint at '{path}'; pass the --out folder of a run started "
                          "with --checkpoint-every")
    outer = _safe_load(path, path.read_bytes())
    if not isinstance(outer, dict) or outer.get("format") != FORMAT:
        raise DataError(f"'{path}' is not a fedgl checkpoint; pass the --out folder of a run "
                        "started with --checkpoint-every")
    if outer.get("version") != VERSION:
        raise DataError(f"checkpoint '{path}' has format version {outer.get('version')!r}, this "
                        f"fedgl reads version {VERSION}; resume it with the fedgl that wrote it "
                        "or start the run again")
    try:
        data = bytes(outer["payload"].numpy().tobytes())
    except (KeyError, AttributeError, TypeError):
        raise DataError(f"checkpoint '{path}' has no payload; start the run again") from None
    if hashlib.sha256(data).hexdigest() != outer.get("sha256"):
        raise DataError(f"checkpoint '{path}' fails its checksum (damaged or edited); start the "
                        "run again")
    raw = _safe_load(path, data)
    try:
        prog = raw["progress"]
        ckpt = Checkpoint(raw["config"], raw["completed"],
                          RepeatProgress(**prog) if prog is not None else None, raw["rng"])
        digest = raw["config_sha256"]
    except (KeyError, TypeError, AttributeError) as exc:
        raise DataError(f"checkpoint '{path}' is unreadable ({type(exc).__name__}); start the "
                        "run again") from None
    if config_digest(ckpt.config) != digest:
        raise DataError(f"checkpoint '{path}': its config does not match the digest it was "
                        "written with (edited); start the run again")
    _check_progress(path, ckpt)
    return ckpt


def _safe_load(path: Path, data: bytes) -> Any:
    try:
        return torch.load(io.BytesIO(data), weights_only=True)
    except pickle.UnpicklingError:
        raise DataError(f"checkpoint '{path}' holds objects other than tensors and plain data and "
                        "was refused unread (not a fedgl checkpoint, or tampered with); start the "
                        "run again") from None
    except Exception as exc:  # noqa: BLE001 - any other reader failure: a damaged file
        raise DataError(f"checkpoint '{path}' is unreadable ({type(exc).__name__}); start the "
                        "run again") from None


def _check_progress(path: Path, ckpt: Checkpoint) -> None:
    """The progress must fit the checkpoint's own config (rounds, repeats, clients)."""
    cfg = ckpt.config
    rounds, repeats, clients = cfg.get("rounds"), cfg.get("repeats"), cfg.get("clients")
    if isinstance(repeats, int) and len(ckpt.completed) > repeats:
        raise DataError(f"checkpoint '{path}' holds {len(ckpt.completed)} finished repeats of a "
                        f"{repeats}-repeat run; start the run again")
    p = ckpt.progress
    if p is None:
        return
    if isinstance(rounds, int) and not 0 <= p.round <= rounds:
        raise DataError(f"checkpoint '{path}' is at round {p.round} of a {rounds}-round run; "
                        "start the run again")
    if isinstance(repeats, int) and not 0 <= p.repeat < repeats:
        raise DataError(f"checkpoint '{path}' is in repeat {p.repeat} of a {repeats}-repeat run; "
                        "start the run again")
    entries = p.ledger.get("bytes", []) if isinstance(p.ledger, dict) else []
    ids = {e[2] for e in entries if isinstance(e, list | tuple) and len(e) == 4}
    if isinstance(clients, int) and any(isinstance(c, int) and c >= clients for c in ids):
        raise DataError(f"checkpoint '{path}' counts messages of clients beyond its {clients} "
                        "clients; start the run again")


def check_weights(stored: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    """A resumed model must have the parameters the config builds (names and shapes)."""
    if set(stored) != set(expected):
        missing = sorted(set(expected) - set(stored)) or sorted(set(stored) - set(expected))
        raise DataError(f"checkpoint's model does not fit the config (parameter "
                        f"'{missing[0]}' differs); start the run again")
    for name, tensor in expected.items():
        if tuple(stored[name].shape) != tuple(tensor.shape):
            raise DataError(f"checkpoint's model does not fit the config: '{name}' is "
                            f"{tuple(stored[name].shape)}, the config builds "
                            f"{tuple(tensor.shape)}; start the run again")


def plain(obj: Any) -> Any:
    """``obj`` with numpy arrays as tensors and numpy scalars as Python numbers, so that
    ``torch.load(weights_only=True)`` reads it back."""
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [plain(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(plain(v) for v in obj)
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(obj))
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def rng_state() -> dict[str, Any]:
    """Torch, numpy and Python RNG states as a tensor and plain lists."""
    kind, key, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss = random.getstate()
    return {"torch": torch.get_rng_state(),
            "numpy": [kind, key.astype(np.int64).tolist(), int(pos), int(has_gauss),
                      float(cached)],
            "python": [version, list(internal), gauss]}


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    kind, key, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(key, dtype=np.uint32), pos, has_gauss, cached))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
