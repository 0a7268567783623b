"""Where Planetoid files may come from when the data root lacks them: fedgl's own cache, filled
only by fedgl's own download, every file checked before anything reads it.

The cache is ``<user cache>/planetoid/<Name>/raw`` (``$XDG_CACHE_HOME/fedgl`` or
``~/.cache/fedgl``). Nothing else is read, and no third-party loader ever sees these files: they
are parsed by :func:`fedgl.data.planetoid.read_planetoid` (fedgl's restricted reader).

- Cora and CiteSeer: every file must match the SHA-256 of the published file
  (kimiyoung/planetoid ``data/``), pinned below, both when it is downloaded and whenever the cache
  is read. A file in the cache that does not match (planted, edited or damaged) is refused with a
  one-line :class:`~fedgl.errors.DataError`; it is never parsed.
- PubMed (no pinned sums: its files could not be obtained where fedgl was built): a download is
  parsed and checked by the restricted reader before it is kept, and its SHA-256 sums are written
  to ``fedgl-download.json`` beside it; the cache is read only while every file matches them.

A download goes to a temporary sibling folder, is checked, and is renamed into place, so the
cache never holds half a dataset. :func:`fetch` is the only network access (tests replace it).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import urllib.request
from collections.abc import Callable
from pathlib import Path

from fedgl.data.cache import sha256_file
from fedgl.data.catalog import PLANETOID_SUFFIXES as SUFFIXES
from fedgl.errors import DataError

URL = "https://github.com/kimiyoung/planetoid/raw/master/data/ind.{key}.{suffix}"
MANIFEST = "fedgl-download.json"
MAX_FILE_BYTES = 1 << 28  # the largest Planetoid file (PubMed's allx) is far below this

# SHA-256 of the published files (kimiyoung/planetoid data/, as PyG and this project use them).
PINNED_SHA256: dict[str, dict[str, str]] = {
    "cora": {
        "x": "23cfa55d91c6f624233f5eb7b6e3f141f1bd2b2ae39608a63cf5d084bb27baab",
        "tx": "b9afbaa4a400df991f6f02ef677e1e44da55ffc04801fd02f9e673987829226a",
        "allx": "9419ba2f26f5c35243db64aba110e0f35a04851609e0dc5433450676ca6b8543",
        "y": "94465c14eb53e04ca262198dcbb2521ee8af60fb3f3d546cd6ca24a511b0e7d1",
        "ty": "41f5ac76596a1699cc33f53084a2419e92961c42bb75f36fc38e616d348532ad",
        "ally": "2b998f5cc7fedc86e7f97ca2498f47a1ffc1462c29e2d578b23bf3f62b6e7d71",
        "graph": "58f13302f39dde8852dad6fe6d15b89b077b6d7f837626bce671ef80344b383d",
        "test.index": "297ce89af2b51a6a194181c7dbe1796c6a1cf9cd9349a88383b1b1e227867875",
    },
    "citeseer": {
        "x": "d20de19150741e555de0ed037195630fc194114ebc7fd72ced62810148aa22f6",
        "tx": "539a8906a2da97628d212f2fdd668c109a8b3f0d36574b59e5d3fd5b5303da21",
        "allx": "2ac30345d95c9ec933a817ee0bdd6a5f077f8c184a20e696910192d534414668",
        "y": "8ba87e515d8e3ee3cf52f6d2c5b86aa73f11ecad825a808455209ec26cd54924",
        "ty": "55e5bd1ba1e733a04598753ad1a8d57957f4b8f89e74519f41f4f4938767e4ce",
        "ally": "f704b2d986dde6c2669934de1f3ae5696a6cf9455c0f6b2646a2d135ea0a1c95",
        "graph": "d79a4ef9d3e7169aee8946145f6b7306e35bc79bffad26346cfb94e10e9912a7",
        "test.index": "2af990671580b6b2df5d158d1038f8292e30c9cd821b5453f399659b25b723d4",
    },
}


def fetch(url: str, dest: Path, timeout: float = 60.0) -> None:
    """Download ``url`` to ``dest`` (at most :data:`MAX_FILE_BYTES`)."""
    with urllib.request.urlopen(url, timeout=timeout) as response, dest.open("wb") as out:  # noqa: S310 - a fixed https URL
        total = 0
        while block := response.read(1 << 20):
            total += len(block)
            if total > MAX_FILE_BYTES:
                raise OSError(f"{url} is larger than {MAX_FILE_BYTES} bytes")
            out.write(block)


def cache_folder(folder_name: str) -> Path:
    """``<user cache>/planetoid/<Name>/raw``."""
    from fedgl.data.cache import cache_root

    return cache_root(None, "planetoid") / folder_name / "raw"


def _expected(key: str, folder: Path) -> dict[str, str] | None:
    """The sums the files in ``folder`` must have: pinned, else fedgl's manifest (None: none)."""
    if key in PINNED_SHA256:
        return PINNED_SHA256[key]
    try:
        sums = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(sums, dict) or set(sums) != set(SUFFIXES) \
            or not all(isinstance(v, str) for v in sums.values()):
        return None
    return sums


def verified_cache(key: str, folder_name: str) -> Path | None:
    """The cache folder when it holds every file, each matching its expected SHA-256; None when
    the cache holds no file of the dataset. A file there that fedgl cannot vouch for is refused
    (one line), never read."""
    folder = cache_folder(folder_name)
    present = [s for s in SUFFIXES if (folder / f"ind.{key}.{s}").exists()]
    if not present:
        return None
    fix = (f"delete '{folder}' (fedgl downloads it again when online) or put the dataset under "
           "the data root")
    expected = _expected(key, folder)
    if expected is None:
        raise DataError(f"'{folder}' holds {folder_name} files that fedgl did not download (no "
                        f"{MANIFEST} with their checksums): refused unread; {fix}")
    for s in present:
        path = folder / f"ind.{key}.{s}"
        if not path.is_file() or sha256_file(path) != expected[s]:
            raise DataError(f"'{path}' in fedgl's cache does not match the SHA-256 of the "
                            f"published file (planted, edited or damaged): refused unread; {fix}")
    return folder if len(present) == len(SUFFIXES) else None


def download(key: str, folder_name: str, check: Callable[[Path], object]) -> Path:
    """Fetch the dataset's files into a temporary folder, check them (pinned SHA-256, then
    ``check``: fedgl's restricted reader), record their sums and rename the folder into the
    cache. Any failure leaves the cache as it was and raises a one-line :class:`DataError`."""
    folder = cache_folder(folder_name)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".raw-"))
    try:
        sums = {}
        for s in SUFFIXES:
            url = URL.format(key=key, suffix=s)
            dest = tmp / f"ind.{key}.{s}"
            try:
                fetch(url, dest)
            except Exception as exc:  # noqa: BLE001 - any network or disk failure
                raise DataError(f"downloading {url} failed ({type(exc).__name__}: "
                                f"{str(exc).splitlines()[0] if str(exc) else 'no detail'}); put "
                                f"the {folder_name} files under the data root or set FEDGL_DATA"
                                ) from None
            sums[s] = sha256_file(dest)
            pinned = PINNED_SHA256.get(key, {}).get(s)
            if pinned is not None and sums[s] != pinned:
                raise DataError(f"the downloaded {url} does not match the SHA-256 of the "
                                "published file: not used; try again later, or put the "
                                f"{folder_name} files under the data root")
        check(tmp)  # DataError (one line) for a file the restricted reader refuses
        (tmp / MANIFEST).write_text(json.dumps(sums, indent=1))
        if folder.exists():  # an incomplete earlier download whose files all verified
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
            try:
                folder.parent.rmdir()  # made for this download, and empty: leave no trace
            except OSError:
                pass
    return folder
