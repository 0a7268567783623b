"""The leakage report kept on disk, keyed by content, so that a later run of the same graph,
partition and settings reads it instead of computing it again.

The report (:func:`fedgl.privacy.leakage.leakage_report`) is a pure function of the graph's
features and edges, the owners and a few settings; :mod:`fedgl.privacy.leakage_job` hashes
exactly those (:func:`~fedgl.privacy.leakage_job.inputs_digest`). A stored report's name adds
to that digest the report's own code (the bytes of the modules that compute it,
:data:`REPORT_MODULES`), the fedgl version and the versions of NumPy, SciPy and PyTorch, so
that a changed input, a changed analysis or another numerical library finds nothing and
computes the report anew. One JSON file per report, ``<key>.json`` holding ``{"key", "report"}``,
written to a temporary name and renamed; a file that does not parse or names another key is
ignored (and replaced once the report is computed). Only reports that survive the JSON round
trip unchanged are stored, so a stored report reads back equal to the computed one.

Where: ``$FEDGL_LEAKAGE_CACHE`` if set (``off`` turns the store off), else ``leakage/`` in
the user cache (``$XDG_CACHE_HOME/fedgl``, beside the cached graphs). At most
:data:`MAX_REPORTS` reports are kept; the least recently used go first.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

#: the modules whose code computes the report (fedgl/privacy/<name>.py)
REPORT_MODULES = ("leakage", "leakage_batches", "row_space", "sparse_decoding",
                  "stacked_decoding", "value_decoding")

#: reports kept on disk (a Cora report is about 5 KB)
MAX_REPORTS = 256


def store_folder() -> Path | None:
    """The folder of stored reports, or None where the store is off."""
    env = os.environ.get("FEDGL_LEAKAGE_CACHE")
    if env is not None:
        return None if env.strip().lower() in ("", "off", "0", "no") else Path(env).expanduser()
    from fedgl.data.catalog import default_cache_dir

    return default_cache_dir() / "leakage"


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """The report's code and numerical libraries, hashed (read once per process)."""
    from importlib.metadata import version

    import numpy as np
    import torch

    from fedgl.version import __version__

    # SciPy's version from its installed metadata: importing it would cost a run 0.05 s
    h = hashlib.blake2b(digest_size=20)
    h.update(repr((__version__, np.__version__, version("scipy"), torch.__version__)).encode())
    here = Path(__file__).resolve().parent
    for name in REPORT_MODULES:
        h.update(name.encode())
        h.update((here / f"{name}.py").read_bytes())
    return h.hexdigest()


def stored_key(inputs: str) -> str:
    """A stored report's name: the inputs' digest with the code's."""
    return hashlib.blake2b(f"{inputs}:{code_digest()}".encode(), digest_size=20).hexdigest()


def load(key: str) -> dict[str, Any] | None:
    """The stored report named ``key``, or None (none stored, the store off, a damaged file)."""
    folder = store_folder()
    if folder is None:
        return None
    path = folder / f"{key}.json"
    try:
        with path.open(encoding="utf-8") as f:
            stored = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(stored, dict) or stored.get("key") != key or \
            not isinstance(stored.get("report"), dict):
        return None
    try:
        os.utime(path)   # recently used: pruned last
    except OSError:
        pass
    return stored["report"]


def save(key: str, report: dict[str, Any]) -> None:
    """Store ``report`` as ``key`` (where the store is on and the report reads back equal);
    a folder that cannot be written only means the report is computed next time."""
    folder = store_folder()
    if folder is None:
        return
    try:
        text = json.dumps({"key": key, "report": report}, allow_nan=False,
                          separators=(",", ":"))
    except (TypeError, ValueError):   # NaN, or a value JSON does not hold: not stored
        return
    if json.loads(text)["report"] != report:   # tuples, non-string keys: not stored
        return
    tmp = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".report-", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, folder / f"{key}.json")
        tmp = None
        _prune(folder)
    except OSError:
        return
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def _prune(folder: Path) -> None:
    files = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime)
    for path in files[:max(0, len(files) - MAX_REPORTS)]:
        path.unlink(missing_ok=True)
