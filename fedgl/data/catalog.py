"""Which datasets a data root holds, without importing torch or numpy.

The data root, the dataset names, where each dataset's files are looked for, and the cheap
checks of ``fedgl datasets`` (file sizes and headers, nothing parsed) live here, so that listing
a data root starts as fast as ``fedgl --help``. Loading a dataset is
:mod:`fedgl.data.datasets`' job; it re-exports these names.
"""

from __future__ import annotations

import os
from pathlib import Path

PLANETOID = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}
PLANETOID_SUFFIXES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")

OGB = {  # name -> (folder, split folder, binary files); layout in fedgl.data.ogb
    "ogbn-arxiv": ("ogbn_arxiv", "time", False),
    "ogbn-products": ("ogbn_products", "sales_ranking", False),
    "ogbn-papers100m": ("ogbn_papers100M", "time", True),
}


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/fedgl``, else ``~/.cache/fedgl``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fedgl"


def resolve_data_root(data_root: str | None = None) -> Path:
    """``data_root`` argument, else ``$FEDGL_DATA``, else the user cache folder."""
    if data_root:
        return Path(data_root).expanduser()
    env = os.environ.get("FEDGL_DATA")
    if env:
        return Path(env).expanduser()
    return default_cache_dir()


def planetoid_raw_dir(root: Path, key: str) -> Path | None:
    """The folder under ``root`` holding every ``ind.<key>.*`` file, or None."""
    folder = PLANETOID[key]
    for cand in (root / folder / "raw", root / key / "raw", root / folder, root):
        if all((cand / f"ind.{key}.{s}").is_file() for s in PLANETOID_SUFFIXES):
            return cand
    return None


def ogb_folder(name: str, root: Path) -> Path | None:
    """The folder of OGB dataset ``name`` under ``root`` (it has a ``raw`` folder), or None."""
    folder = OGB[name][0]
    for cand in (root / folder, root / folder.lower(), root / name):
        if (cand / "raw").is_dir():
            return cand
    return None


def available_datasets(data_root: str | None = None) -> dict[str, bool]:
    """Which named datasets can be loaded offline from the data root."""
    root = resolve_data_root(data_root)
    out = {k: planetoid_raw_dir(root, k) is not None for k in PLANETOID}
    out["sbm"] = True
    for name in OGB:
        out[name] = ogb_folder(name, root) is not None
    out["reddit"] = (root / "Reddit" / "raw" / "reddit_data.npz").is_file()
    out["synthetic:arxiv"] = out["synthetic:products"] = True  # generated on first use
    return out


def quick_problem(raw: Path, key: str) -> str | None:
    """Cheap checks of Planetoid files present under a data root (sizes and the pickle's first
    and last byte, no parsing): the first problem found, or None. ``--check`` parses everything."""
    for s in PLANETOID_SUFFIXES:
        path = raw / f"ind.{key}.{s}"
        try:
            size = path.stat().st_size
            with path.open("rb") as f:
                head = f.read(2)
                f.seek(max(size - 1, 0))
                tail = f.read(1)
        except OSError as exc:
            return f"{path.name} cannot be read ({exc.strerror})"
        if size == 0:
            return f"{path.name} is empty"
        if s == "test.index":
            if not head[:1].isdigit():
                return f"{path.name} is not a list of node indices"
        elif head[:1] != b"\x80" and head[:1] not in (b"(", b"c", b"]", b"}"):
            return f"{path.name} is not a pickle"
        elif tail != b".":
            return f"{path.name} is truncated (no end-of-pickle mark)"
    return None


def dataset_problems(data_root: str | None = None) -> dict[str, str]:
    """Cheap checks (sizes, file headers; nothing parsed) of the Planetoid datasets present
    under the data root: name -> the first problem found, for the damaged ones only."""
    root = resolve_data_root(data_root)
    out = {}
    for key in PLANETOID:
        raw = planetoid_raw_dir(root, key)
        problem = quick_problem(raw, key) if raw is not None else None
        if problem is not None:
            out[key] = problem
    return out
