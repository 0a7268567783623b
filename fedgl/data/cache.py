"""A checksummed on-disk cache of named numpy arrays (one ``.npy`` file each, ``meta.json``).

Used for graphs that are expensive to build (generated synthetic graphs, parsed OGB csv files).
A folder is written to a temporary sibling and renamed into place, so a reader never sees half a
cache; ``meta.json`` holds a SHA-256 per file, and a folder failing any checksum is reported as
absent (with a warning) so that the caller rebuilds it. The cache lives in the user cache
(``$XDG_CACHE_HOME/fedgl`` or ``~/.cache/fedgl``), never in the data root.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 24):
            h.update(block)
    return h.hexdigest()


def cache_root(cache_dir: str | Path | None, kind: str) -> Path:
    """``cache_dir`` if given, else ``<user cache>/<kind>``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    from fedgl.data.catalog import default_cache_dir

    return default_cache_dir() / kind


def write_arrays(folder: Path, arrays: dict[str, np.ndarray], meta: dict) -> None:
    """Write ``arrays`` and ``meta`` (plus the checksums) to ``folder``, atomically."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        sums = {}
        for k, arr in arrays.items():
            np.save(tmp / f"{k}.npy", arr)
            sums[k] = sha256_file(tmp / f"{k}.npy")
        (tmp / "meta.json").write_text(json.dumps({**meta, "sha256": sums}, indent=1))
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def read_arrays(folder: Path, names: tuple[str, ...]) -> dict[str, np.ndarray] | None:
    """The cached arrays, or None when the folder is absent or fails a checksum."""
    meta_path = folder / "meta.json"
    if not meta_path.is_file():
        return None
    try:
        meta = json.loads(meta_path.read_text())
        bad = [k for k in names if sha256_file(folder / f"{k}.npy") != meta["sha256"][k]]
    except (OSError, ValueError, KeyError):
        bad = ["meta.json"]
    if bad:
        warnings.warn(f"cache '{folder}' fails its checksum ({', '.join(bad)}); rebuilding it",
                      stacklevel=3)
        return None
    return {k: np.load(folder / f"{k}.npy", allow_pickle=False) for k in names}


def cached_arrays(folder: Path, names: tuple[str, ...], build, meta: dict,
                  use_cache: bool = True) -> dict[str, np.ndarray]:
    """Read ``folder`` or call ``build()`` and cache its result (a failed write only warns)."""
    if use_cache:
        arrays = read_arrays(folder, names)
        if arrays is not None:
            return arrays
    arrays = build()
    if use_cache:
        try:
            write_arrays(folder, arrays, meta)
        except OSError as exc:
            warnings.warn(f"could not write the cache '{folder}' ({exc}); it will be rebuilt next "
                          "time", stacklevel=2)
    return arrays
