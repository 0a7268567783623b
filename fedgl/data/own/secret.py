"""The federation secret and the keyed pseudonyms of entity ids.

The organisations agree on one secret (``fedgl secret`` makes it: 32 random bytes, written as
64 hex digits); they share it among themselves and never give it to the server. An entity id
``s`` (a UTF-8 string: an account number, a patient id) becomes the pseudonym

    p(s) = HMAC-SHA256(secret, "fedgl-id/1" || 0x00 || s)[:16]

so the same id gets the same pseudonym at every organisation (cross-organisation edges match),
while anyone without the secret can neither invert a pseudonym nor test a guessed id against it.
128 bits make a collision among 10^9 ids about 10^-21 likely.

:func:`secret_check` is a public fingerprint of the secret (a keyed hash of a fixed label): set-up
compares the organisations' fingerprints, so one that used another secret (its cross edges
would match nothing) is refused in one line; the fingerprint reveals nothing about the secret.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from fedgl.errors import DataError

#: bytes of a pseudonym
PSEUDONYM_BYTES = 16
#: the fewest bytes a secret file may hold
MIN_SECRET_BYTES = 32
_ID_CONTEXT = b"fedgl-id/1\x00"
_CHECK_CONTEXT = b"fedgl-secret-check/1"


def make_secret(path: str | Path) -> Path:
    """Write 32 fresh random bytes (hex, one line) to ``path`` (mode 0600); never overwrites."""
    path = Path(path)
    if path.exists():
        raise DataError(f"'{path}' exists; secrets are never overwritten, choose another path")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    return path


def read_secret(path: str | Path) -> bytes:
    """The secret's bytes: the file's content (a hex line from ``fedgl secret`` is decoded; any
    other file is taken as raw bytes). At least 32 bytes, not all equal."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"--secret '{path}' does not exist; make it with `fedgl secret --out "
                        "FILE` and share it among the organisations") from None
    except OSError as exc:
        raise DataError(f"--secret '{path}' is unreadable ({exc.strerror}); fix its "
                        "permissions") from None
    text = raw.strip()
    try:
        key = bytes.fromhex(text.decode("ascii")) if text else b""
    except (UnicodeDecodeError, ValueError):
        key = raw
    if len(key) < MIN_SECRET_BYTES:
        raise DataError(f"--secret '{path}' holds {len(key)} bytes, fewer than "
                        f"{MIN_SECRET_BYTES}; make one with `fedgl secret --out FILE`")
    if len(set(key)) == 1:
        raise DataError(f"--secret '{path}' repeats one byte: it is not random; make one with "
                        "`fedgl secret --out FILE`")
    return key


def pseudonyms(secret: bytes, ids: Iterable[str]) -> np.ndarray:
    """``uint8 [n, 16]``: the pseudonym of every id, in the order given."""
    base = hmac.new(secret, _ID_CONTEXT, hashlib.sha256)
    out = bytearray()
    for s in ids:
        h = base.copy()
        h.update(s.encode("utf-8"))
        out += h.digest()[:PSEUDONYM_BYTES]
    return np.frombuffer(bytes(out), dtype=np.uint8).reshape(-1, PSEUDONYM_BYTES).copy()


def secret_check(secret: bytes) -> str:
    """The secret's public fingerprint (hex): equal at two organisations iff their secrets are."""
    return hmac.new(secret, _CHECK_CONTEXT, hashlib.sha256).hexdigest()[:32]


def as_keys(p: np.ndarray) -> np.ndarray:
    """Pseudonyms ``uint8 [n, 16]`` as one sortable fixed-width bytes value each (``S16``)."""
    return np.ascontiguousarray(p, dtype=np.uint8).view(f"S{PSEUDONYM_BYTES}").reshape(-1)
