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
import itertools
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

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


def pseudonyms(secret: bytes, ids: Iterable[str | bytes]) -> np.ndarray:
    """``uint8 [n, 16]``: the pseudonym of every id (text, or its UTF-8 bytes), in the order
    given. Byte for byte the HMAC above, computed from the key's two precomputed SHA-256 states
    (one copy and one compression each per id, no HMAC object per id) in batches, so that
    10^7 ids never sit in memory as 10^7 digests."""
    inner, outer = _hmac_states(secret)
    icopy, ocopy = inner.copy, outer.copy

    def one(s: str | bytes) -> bytes:
        h = icopy()
        h.update(s.encode("utf-8") if isinstance(s, str) else s)
        o = ocopy()
        o.update(h.digest())
        return o.digest()

    parts = []
    it = iter(ids)
    while True:
        batch = b"".join(map(one, itertools.islice(it, _BATCH)))
        if not batch:
            break
        parts.append(np.frombuffer(batch, dtype=np.uint8).reshape(-1, 32)[:, :PSEUDONYM_BYTES])
    if not parts:
        return np.zeros((0, PSEUDONYM_BYTES), dtype=np.uint8)
    return np.ascontiguousarray(np.concatenate(parts))


#: ids hashed per batch by :func:`pseudonyms`
_BATCH = 1 << 16


def _hmac_states(secret: bytes) -> tuple[Any, Any]:
    """HMAC-SHA256's inner state after ``(key ^ ipad) || _ID_CONTEXT`` and outer state after
    ``key ^ opad`` (RFC 2104: a key longer than the block is hashed first)."""
    key = hashlib.sha256(secret).digest() if len(secret) > 64 else secret
    key = key.ljust(64, b"\x00")
    inner = hashlib.sha256(bytes(k ^ 0x36 for k in key) + _ID_CONTEXT)
    outer = hashlib.sha256(bytes(k ^ 0x5C for k in key))
    return inner, outer


def secret_check(secret: bytes) -> str:
    """The secret's public fingerprint (hex): equal at two organisations iff their secrets are."""
    return hmac.new(secret, _CHECK_CONTEXT, hashlib.sha256).hexdigest()[:32]


def as_keys(p: np.ndarray) -> np.ndarray:
    """Pseudonyms ``uint8 [n, 16]`` as one sortable fixed-width bytes value each (``S16``)."""
    return np.ascontiguousarray(p, dtype=np.uint8).view(f"S{PSEUDONYM_BYTES}").reshape(-1)


def order_of(p: np.ndarray) -> np.ndarray:
    """``np.argsort(as_keys(p), kind="stable")`` (the pseudonyms' byte order, ties by position),
    computed on the first 8 bytes as big-endian integers (the rest only where two share them)."""
    p = np.ascontiguousarray(p, dtype=np.uint8).reshape(-1, PSEUDONYM_BYTES)
    hi = p[:, :8].copy().view(">u8").reshape(-1).astype(np.uint64)
    order = np.argsort(hi, kind="stable")
    if len(order) > 1 and bool((hi[order[1:]] == hi[order[:-1]]).any()):
        lo = p[:, 8:].copy().view(">u8").reshape(-1).astype(np.uint64)
        order = np.lexsort((lo, hi))
    return order
