"""Private set intersection for vertical alignment: K parties find their common entities.

Commutative (Diffie-Hellman) blinding on X25519 (``cryptography``), every message relayed by the
server as a typed, ledger-counted message (phase ``setup``):

- party ``j`` holds ids ``S_j`` and a fresh scalar ``k_j``; each id ``s`` enters as
  ``u(s) = SHA-256("fedgl-psi/1" || p(s))``, ``p`` the keyed pseudonym of
  :mod:`fedgl.data.own.secret` (the organisations' secret, which the server never holds), taken
  as an X25519 u-coordinate;
- ``psi.start``: party ``j`` answers ``[k_j] u(s)`` for its ids, sorted by value (a random
  order); ``psi.blind`` (at most ``K - 1`` times a run): party ``i`` answers ``[k_i] v`` for
  each value ``v`` sent, in the order sent. The server passes each party's set around the ring
  ``j -> j+1 -> ... -> j-1``, so it ends as ``F_j = [k_0 ... k_{K-1}] u(S_j)``, the same value
  for the same id at every party (scalar multiplication commutes; X25519 clamps every scalar
  to a multiple of the cofactor, so both orders give the same x-coordinate);
- the server intersects ``F_0 ∩ ... ∩ F_{K-1}`` and sends party ``j`` (``psi.result``) the
  positions of its ids in the intersection. The common row order of the aligned data is the
  byte order of the common ids' pseudonyms: every party knows the pseudonyms of its common ids,
  so all agree on it without another message, and it does not depend on the parties' random
  scalars (the same tables give the same aligned rows at every run and on every route:
  in process, or through files a relay passes around, :mod:`fedgl.privacy.psi_files`).

What each learns (honest-but-curious parties): a party learns which of its own ids are common
to all (and the set sizes); it sees other parties' ids only blinded by keys it does not hold,
so it learns no id outside the intersection. The server learns the set sizes and the size of
every intersection of the sets; it cannot test a guessed id, since it cannot compute ``p(s)``
without the secret, and a party blinds at most ``K - 1`` sets, so the server cannot use the
parties as an oracle beyond the protocol. The server could misreport the intersection (the
parties would then align wrong rows): the protocol keeps ids private, it does not prove the
server's arithmetic (the parties of :mod:`fedgl.privacy.psi_files` can compare the digest of
their common pseudonyms among themselves, which reveals such a misreport).

OpenMined's ``openmined-psi`` (``pip install 'fedgl[psi]'``) is a two-party protocol (the client
learns the intersection); chained over K > 2 parties, a party would learn the intersection of the
first two sets, ids outside the final one. ``benchmarks/bench_psi.py`` measures it beside this
protocol for two parties.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from fedgl.federation.protocol import Arr, Bytes, handles

SETUP_PHASE = "setup"
VALUE_BYTES = 32
_CONTEXT = b"fedgl-psi/1"
#: values per thread's task when a party blinds with several threads
_CHUNK = 4096


def _points(pseudonyms: np.ndarray) -> list[bytes]:
    return [hashlib.sha256(_CONTEXT + bytes(p)).digest() for p in pseudonyms]


class PsiParty:
    """One party's role in the intersection (see the module docstring)."""

    def __init__(self, client_id: int, pseudonyms: np.ndarray, parties: int,
                 key: bytes | None = None, threads: int = 1) -> None:
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

        if threads < 1:
            raise ValueError(f"threads must be at least 1 (got {threads})")
        self.client_id = client_id
        #: threads that blind (X25519 in ``cryptography`` releases the GIL; the values are the
        #: same for any number)
        self.threads = threads
        self._key = X25519PrivateKey.generate() if key is None else \
            X25519PrivateKey.from_private_bytes(key)
        self._pseudonyms = np.ascontiguousarray(pseudonyms, dtype=np.uint8)
        self._budget = parties - 1
        self._order: np.ndarray | None = None
        #: after the result: positions (into the pseudonyms given) of the common ids, in the
        #: common order (their pseudonyms' byte order)
        self.common: np.ndarray | None = None

    def key_bytes(self) -> bytes:
        """The party's secret scalar (raw 32 bytes), for a party that keeps its state between
        steps on its own disk (:mod:`fedgl.privacy.psi_files`); it never leaves the party."""
        from cryptography.hazmat.primitives import serialization as ser

        return self._key.private_bytes(ser.Encoding.Raw, ser.PrivateFormat.Raw,
                                       ser.NoEncryption())

    def state(self) -> dict[str, Any]:
        """What a party keeps between steps on its own disk (:mod:`fedgl.privacy.psi_files`):
        its scalar, the start's order, the blinds it may still make."""
        return {"key": self.key_bytes(), "order": self._order, "budget": self._budget}

    @classmethod
    def restore(cls, client_id: int, pseudonyms: np.ndarray, parties: int,
                state: dict[str, Any], threads: int = 1) -> PsiParty:
        """The party again, from :meth:`state` (after its start)."""
        party = cls(client_id, pseudonyms, parties, key=bytes(state["key"]), threads=threads)
        party._order = np.asarray(state["order"], dtype=np.int64)
        party._budget = int(state["budget"])
        return party

    def _blind(self, values: list[bytes]) -> bytes:
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey

        ex = self._key.exchange

        def run(chunk: list[bytes]) -> bytes:
            return b"".join(ex(X25519PublicKey.from_public_bytes(v)) for v in chunk)

        if self.threads == 1 or len(values) < 2 * _CHUNK:
            return run(values)
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(self.threads) as pool:
            return b"".join(pool.map(run, [values[i:i + _CHUNK]
                                           for i in range(0, len(values), _CHUNK)]))

    @handles("psi.start", phases=(SETUP_PHASE,), states=("ready",), enters="started")
    def start(self) -> dict[str, Any]:
        blinded = self._blind(_points(self._pseudonyms))
        arr = np.frombuffer(blinded, dtype=np.uint8).reshape(-1, VALUE_BYTES)
        self._order = np.lexsort(arr.T[::-1])
        return {"values": arr[self._order].tobytes()}

    @handles("psi.blind", phases=(SETUP_PHASE,), states=("started",),
             schema={"values": Bytes(max_len=VALUE_BYTES << 28)})
    def blind(self, values: bytes) -> dict[str, Any]:
        if self._budget <= 0:
            raise ValueError("this party already blinded every other party's set once")
        if len(values) % VALUE_BYTES:
            raise ValueError(f"{len(values)} bytes is not a whole number of values")
        self._budget -= 1
        return {"values": self._blind([values[i:i + VALUE_BYTES]
                                       for i in range(0, len(values), VALUE_BYTES)])}

    @handles("psi.result", phases=(SETUP_PHASE,), states=("started",), enters="done",
             schema={"positions": Arr(("int64",), ndim=1)})
    def result(self, positions: Any) -> dict[str, Any]:
        assert self._order is not None
        self.common = common_rows(self._pseudonyms, self._order, np.asarray(positions))
        return {"ok": True}


def common_rows(pseudonyms: np.ndarray, order: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The common ids (positions into ``pseudonyms``) in their pseudonyms' byte order, from the
    server's ``positions`` (into the start's values, whose order ``order`` maps back)."""
    n = len(order)
    pos = np.asarray(positions)
    if pos.ndim != 1 or (pos.size and (pos.min() < 0 or pos.max() >= n)) or \
            len(np.unique(pos)) != len(pos):
        raise ValueError("the positions are not a placement of this party's ids")
    mine = order[pos]
    keys = np.ascontiguousarray(pseudonyms[mine]).view(f"S{pseudonyms.shape[1]}").reshape(-1)
    return mine[np.argsort(keys, kind="stable")].astype(np.int64)


def intersect_blinded(full: dict[int, bytes]) -> dict[int, dict[str, np.ndarray]]:
    """The server's step: for each party, the positions of its fully blinded values that every
    party holds."""
    sets = {j: np.frombuffer(v, dtype=np.uint8).reshape(-1, VALUE_BYTES).view(f"S{VALUE_BYTES}")
            .reshape(-1) for j, v in full.items()}
    common = None
    for v in sets.values():
        common = np.unique(v) if common is None else np.intersect1d(common, v)
    assert common is not None
    out = {}
    for j, v in sets.items():
        pos = np.flatnonzero(np.isin(v, common))
        out[j] = {"positions": pos.astype(np.int64)}
    return out


def run_psi(runtime: Any, parties: list[int]) -> dict[str, Any]:
    """Drive the protocol over ``runtime`` (the server's side); the intersection's size."""
    k = len(parties)
    started = runtime.call("psi.start", {}, phase=SETUP_PHASE)
    current = {j: started[j]["values"] for j in parties}   # origin -> its set, blinded so far
    for hop in range(1, k):
        for idx, j in enumerate(parties):
            at = parties[(idx + hop) % k]
            current[j] = runtime.call("psi.blind", {at: {"values": current[j]}},
                                      phase=SETUP_PHASE, clients=[at])[at]["values"]
    placed = intersect_blinded(current)
    runtime.call("psi.result", {j: placed[j] for j in parties}, phase=SETUP_PHASE)
    return {"common": int(len(placed[parties[0]]["positions"])),
            "sizes": {str(j): len(current[j]) // VALUE_BYTES for j in parties}}
