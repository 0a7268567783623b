"""Atomic writes of the ingest's files (a file beside the target, then renamed), without
importing torch (:mod:`fedgl.data.shard_format` does): ``fedgl ingest`` starts in a fraction
of a second and stays small."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


@contextmanager
def atomic_file(path: Path) -> Iterator[BinaryIO]:
    """A binary file (also readable) to write ``path``'s bytes into: ``path`` appears whole
    when the block ends, or not at all when it raises."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "w+b") as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic(path: Path, data: bytes) -> None:
    """``data`` as ``path``, written atomically."""
    with atomic_file(path) as f:
        f.write(data)
