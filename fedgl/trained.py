"""The model a run leaves, and its files: safetensors weights and a JSON card.

A repeat's driver follows its rounds with a :class:`ModelTracker`, which keeps the final global
model and, where a later round scored lower on validation, the best-validation round's (the round
:func:`fedgl.algorithms.runner.finish_repeat` selects: highest ``val_acc``, earliest on ties). The
repeat's result carries them as plain data (:attr:`fedgl.results.RepeatResult.model`)::

    {"parts": {"global": {name: tensor}}, "round": 100,
     "best_parts": {"global": {...}} or None, "best_round": 87}

A model has one *part* (``global``) or several: GLASU's parties and server, a local-only
baseline's clients. :func:`write_model` writes each part to ``<part>.safetensors`` (the best
round's, where different, to ``best/<part>.safetensors``) and the card ``model.json``, whose
``sha256`` every organisation can compare (:func:`weights_digest`). :func:`read_model` reads them
back without running anything a file holds: safetensors has no code path, the card is JSON, and
every file's digest is checked against the card before a tensor is used.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from torch import Tensor

from fedgl.errors import FedglError

#: the card's format tag and version (a reader refuses others in one line)
CARD_FORMAT = "fedgl-model"
CARD_VERSION = 1
CARD_FILE = "model.json"
BEST_FOLDER = "best"
#: a part's name becomes a file name: letters, digits, ``-`` and ``_`` only
_PART_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: the largest card a reader accepts (a card is a few kB; a crafted one is not parsed)
MAX_CARD_BYTES = 16 << 20


class ModelFileError(FedglError):
    """A model folder that cannot be used: missing, altered, of another format, or not matching
    its card. The message names the file and the fix."""


def plain_state(weights: Any) -> dict[str, Tensor] | None:
    """A detached CPU copy of a state dict, or None where ``weights`` is not one (an encrypted
    model the coordinator never sees in the clear)."""
    if not isinstance(weights, dict) or not weights:
        return None
    if not all(isinstance(k, str) and isinstance(v, Tensor) for k, v in weights.items()):
        return None
    return {k: v.detach().to("cpu").clone().contiguous() for k, v in weights.items()}


def _num(v: object) -> float:
    return float(v) if isinstance(v, int | float) and not math.isnan(v) else -1.0


class ModelTracker:
    """Keeps the models a repeat leaves while its rounds go by (see the module docstring).

    ``observe(t, weights, row)`` after every round: ``weights`` is the round's global state dict
    (or, with ``parts``, a dict part name -> state dict), or a function returning it (read only
    when needed: models kept by the parties themselves); ``row`` its history row. The best
    round's weights are copied when its validation accuracy rises; the last round's at
    :meth:`record`.
    """

    def __init__(self, *, parts: bool = False) -> None:
        self.parts = parts
        self._last: tuple[int, Any] | None = None
        self._best: tuple[int, dict[str, dict[str, Tensor]]] | None = None
        self._best_val = -math.inf

    def _as_parts(self, weights: Any) -> dict[str, dict[str, Tensor]] | None:
        if callable(weights):
            weights = weights()
        given = weights if self.parts else {"global": weights}
        if not isinstance(given, dict) or not given:
            return None
        out = {}
        for name, state in given.items():
            plain = plain_state(state)
            if plain is None:
                return None
            out[str(name)] = plain
        return out

    def observe(self, t: int, weights: Any, row: dict) -> None:
        self._last = (t, weights)
        if "test_acc" not in row:
            return
        val = _num(row.get("val_acc"))
        if val > self._best_val:
            parts = self._as_parts(weights)
            if parts is not None:
                self._best_val, self._best = val, (t, parts)

    def record(self) -> dict[str, Any] | None:
        """The repeat's model as plain data, or None (no round ran, or the model never was in
        the clear here)."""
        if self._last is None:
            return None
        t, weights = self._last
        parts = self._as_parts(weights)
        if parts is None:
            return None
        best = self._best if self._best is not None and self._best[0] != t else None
        return {"parts": parts, "round": int(t),
                "best_parts": best[1] if best else None,
                "best_round": int(best[0]) if best else int(t)}


# --------------------------------------------------------------------------- files
def encode_part(state: dict[str, Tensor], part: str) -> bytes:
    """A state dict as safetensors bytes (keys sorted by the format; deterministic)."""
    from safetensors.torch import save

    return save({k: v.contiguous() for k, v in state.items()}, metadata={"part": part})


def weights_digest(file_digests: dict[str, str]) -> str:
    """The model's digest: the one part's file SHA-256, or for several parts the SHA-256 of
    ``name=digest`` lines in name order (the same on every machine)."""
    if len(file_digests) == 1:
        return next(iter(file_digests.values()))
    text = "".join(f"{name}={file_digests[name]}\n" for name in sorted(file_digests))
    return hashlib.sha256(text.encode()).hexdigest()


def write_model(folder: str | Path, model: dict[str, Any], card: dict[str, Any]) -> dict:
    """Write ``model`` (a :meth:`ModelTracker.record`) and its card into ``folder``; return the
    card as written (with ``files``, ``best_files`` and ``sha256`` filled in)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    card = dict(card)
    card["format"], card["version"] = CARD_FORMAT, CARD_VERSION
    card["files"], card["sha256"] = _write_parts(folder, model["parts"])
    if model.get("best_parts"):
        card["best_files"], card["best_sha256"] = _write_parts(folder / BEST_FOLDER,
                                                               model["best_parts"])
    _atomic_write(folder / CARD_FILE, (json.dumps(_json_safe(card), indent=2) + "\n").encode())
    return card


def _write_parts(folder: Path, parts: dict[str, dict[str, Tensor]]) -> tuple[dict, str]:
    folder.mkdir(parents=True, exist_ok=True)
    files, digests = {}, {}
    for name in sorted(parts):
        if not _PART_NAME.match(name):
            raise ValueError(f"model part name {name!r} is not a plain name")
        data = encode_part(parts[name], name)
        digests[name] = hashlib.sha256(data).hexdigest()
        _atomic_write(folder / f"{name}.safetensors", data)
        files[name] = {"file": f"{name}.safetensors", "sha256": digests[name],
                       "tensors": {k: list(v.shape) for k, v in sorted(parts[name].items())}}
    return files, weights_digest(digests)


def read_card(folder: str | Path) -> dict[str, Any]:
    """The card of a model folder, checked for its format (no weights are read)."""
    folder = Path(folder)
    path = folder / CARD_FILE
    if not folder.is_dir():
        raise ModelFileError(f"model folder '{folder}' does not exist; pass the model/ folder a "
                             "run wrote (<out>/model)")
    if not path.is_file():
        raise ModelFileError(f"'{folder}' has no {CARD_FILE}; pass the model/ folder a run wrote "
                             "(<out>/model)")
    if path.stat().st_size > MAX_CARD_BYTES:
        raise ModelFileError(f"'{path}' is larger than a model card can be; use the card fedgl "
                             "wrote")
    try:
        card = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelFileError(f"'{path}' is not a JSON model card ({exc}); use the card fedgl "
                             "wrote") from None
    if not isinstance(card, dict) or card.get("format") != CARD_FORMAT:
        raise ModelFileError(f"'{path}' is not a fedgl model card (format "
                             f"{card.get('format') if isinstance(card, dict) else None!r}); "
                             "pass the model/ folder a fedgl run wrote")
    if card.get("version") != CARD_VERSION:
        raise ModelFileError(f"'{path}' is version {card.get('version')!r} of the model card; "
                             f"this fedgl reads version {CARD_VERSION}: upgrade fedgl or retrain")
    if not isinstance(card.get("files"), dict) or not card["files"]:
        raise ModelFileError(f"'{path}' lists no weight files; use the card fedgl wrote")
    return card


def read_model(folder: str | Path, *, best: bool = False) -> tuple[dict[str, dict[str, Tensor]],
                                                                    dict[str, Any]]:
    """``(parts, card)`` of a model folder: every part's tensors, each file's SHA-256 checked
    against the card first. ``best``: the best-validation round's weights (the final ones where
    the card has none apart)."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    folder = Path(folder)
    card = read_card(folder)
    files, where = card["files"], folder
    if best and card.get("best_files"):
        files, where = card["best_files"], folder / BEST_FOLDER
    parts: dict[str, dict[str, Tensor]] = {}
    digests = {}
    for name, entry in files.items():
        if not _PART_NAME.match(str(name)) or not isinstance(entry, dict):
            raise ModelFileError(f"'{folder / CARD_FILE}' names a part {name!r} that is not a "
                                 "plain name; use the card fedgl wrote")
        path = where / f"{name}.safetensors"
        if not path.is_file():
            raise ModelFileError(f"'{path}' is missing; copy the whole model folder")
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if digest != entry.get("sha256"):
            raise ModelFileError(f"'{path}' does not match its card's SHA-256 (altered or "
                                 "damaged); copy the model folder again from its source")
        try:
            state = load(data)
        except (SafetensorError, ValueError, RuntimeError) as exc:
            raise ModelFileError(f"'{path}' is not a safetensors file ({exc}); copy the model "
                                 "folder again from its source") from None
        shapes = {k: list(v.shape) for k, v in sorted(state.items())}
        if shapes != entry.get("tensors"):
            raise ModelFileError(f"'{path}' holds other tensors than its card lists; use the "
                                 "model folder as fedgl wrote it")
        parts[str(name)] = state
        digests[str(name)] = digest
    expected = card.get("best_sha256") if where != folder else card.get("sha256")
    if weights_digest(digests) != expected:
        raise ModelFileError(f"'{folder / CARD_FILE}': the weights' digest differs from the "
                             "card's sha256; copy the model folder again from its source")
    return parts, card


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float) and (math.isnan(obj) or math.isinf(obj)):
        return None
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_json_safe(v) for v in obj]
    return obj


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        mask = os.umask(0o022)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
