"""The server side of the authenticated secure sum (:mod:`fedgl.privacy.secagg`): it builds
key directories from the signed adverts, relays confirmations and encrypted shares, and unmasks:
``Σ_{u ∈ U3} y_u − Σ_{u ∈ U3} PRG(b_u) ∓ Σ_{u dropped, v ∈ U3} PRG(k_uv) = Σ_{u ∈ U3} x_u``
(robust), or simply ``Σ_u y_u`` (mask, where every client must upload). The seeds and keys come
from the Shamir shares the survivors reveal once they have seen t signatures on U3.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from fedgl.errors import RunAborted
from fedgl.privacy.identity import shamir_combine
from fedgl.privacy.secagg import (
    Segments,
    apply_pair_mask,
    decode_fixed,
    default_threshold,
    directory_hash,
    mask_key,
    pair_spans,
    prg,
)

# ---------------------------------------------------------------------- server side
Call = Callable[[str, Mapping[int, dict], list[int]], dict | None]


@dataclass
class SecureSumServer:
    """The server's side: builds directories, relays confirmations and shares, and unmasks.

    ``call(method, per_client_args, clients)`` is the algorithm's ``runtime.call`` (with its
    ledger phase) and returns None when the protocol must restart (a client restarted)."""

    mode: str = "mask"
    threshold: int = 0
    stats: dict = field(default_factory=dict)

    def directory(self, adverts: Mapping[int, dict]) -> dict:
        ids = sorted(adverts)
        return {"ids": ids, "c": [adverts[k]["c"] for k in ids],
                "s": [adverts[k]["s"] for k in ids], "sig": [adverts[k]["sig"] for k in ids]}

    def relay(self, key_replies: Mapping[int, dict]) -> dict[int, dict]:
        """Per client, the confirmation tags (and shares) its peers addressed to it."""
        out: dict[int, dict] = {k: {"confirm": {}} for k in key_replies}
        for u, rep in key_replies.items():
            for v, tag in rep["confirm"].items():
                if v in out:
                    out[v]["confirm"][u] = tag
            for v, ct in rep.get("shares", {}).items():
                if v in out:
                    out[v].setdefault("shares", {})[u] = ct
        if self.mode == "robust":
            for v in out:
                out[v].setdefault("shares", {})
        return out

    def unmask(self, call: Call, session: bytes, instance: str, directory: dict, u2: list[int],
               uploads: Mapping[int, np.ndarray], placement: Mapping[int, list[tuple[int, int]]],
               segments: Mapping[int, Segments], length: int) -> np.ndarray | None:
        """The sum (float64, ``length`` positions) of the survivors' inputs.

        ``placement[k]``: (global start, length) of each of k's segments; ``segments[k]``: the
        (length, peers) list k masked with. None: a client restarted (start over)."""
        u3 = sorted(uploads)
        acc = np.zeros(length, dtype=np.uint64)
        pos = {k: _positions(placement[k]) for k in u3}
        for k in u3:  # positions are distinct within one client's upload; uint64 wraps mod 2^64
            acc[pos[k]] += np.asarray(uploads[k], dtype=np.uint64)
        if self.mode == "mask":
            if u3 != sorted(u2):
                return None  # masks of a missing client would not cancel
            return decode_fixed(acc)
        t = self.threshold or default_threshold(len(directory["ids"]))
        if len(u3) < t:
            raise RunAborted(f"only {len(u3)} clients uploaded, below the secure-sum threshold "
                             f"{t}: the sum cannot be recovered; the run stops")
        sigs = call("secagg.consistency", {k: {"session": session, "survivors": u3} for k in u3}, u3)
        if sigs is None:
            return None
        signatures = {k: r["sig"] for k, r in sigs.items()}
        signers = sorted(sigs)
        revealed = call("secagg.unmask", {k: {"session": session, "signatures": signatures}
                                          for k in signers}, signers)
        if revealed is None:
            return None
        if len(revealed) < t:
            raise RunAborted(f"only {len(revealed)} clients answered the unmasking step, below "
                             f"the threshold {t}; the run stops")
        dropped = sorted(set(u2) - set(u3))
        for u in u3:  # remove self masks
            seed = _combine({v: r["b"][u] for v, r in revealed.items()}, u)
            acc[pos[u]] -= prg(seed, pos[u].size)
        s_pub = dict(zip(directory["ids"], directory["s"], strict=True))
        dir_hash = directory_hash(session, instance, directory)
        for u in dropped:  # remove survivors' pairwise masks with dropped clients
            from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

            s_u = X25519PrivateKey.from_private_bytes(
                _combine({v: r["s"][u] for v, r in revealed.items()}, u))
            for v in u3:
                spans = pair_spans(segments[v], u)
                if not spans:
                    continue
                key = mask_key(s_u, s_pub[v], session, dir_hash, u, v)
                local = np.zeros(sum(n for n, _ in segments[v]), dtype=np.uint64)
                apply_pair_mask(local, spans, key, v < u)
                acc[pos[v]] -= local
        self.stats["dropped_in_session"] = dropped
        return decode_fixed(acc)


def _combine(shares: Mapping[int, bytes], owner: int) -> bytes:
    try:
        return shamir_combine(shares)
    except ValueError:
        raise RunAborted(f"the shares of client {owner}'s secret do not reconstruct it (a client "
                         "sent a corrupt share); the run stops") from None


def _positions(placement: Sequence[tuple[int, int]]) -> np.ndarray:
    parts = [np.arange(s, s + n, dtype=np.int64) for s, n in placement]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


# ---------------------------------------------------------------------- one vector, everyone
def secure_vector_sum(call: Call, clients: list[int], instance: str, length: int,
                      server: SecureSumServer) -> tuple[np.ndarray, list[int]] | None:
    """Σ_k x_k over ``clients`` where every client's input (``secagg_input(instance)``) has
    ``length`` values (a model average: divide by the summed coefficients). Returns the sum and
    the clients it covers, or None when a client restarted mid-way."""
    session = os.urandom(16)
    adv = call("secagg.advertise", {k: {"session": session, "instance": instance}
                                    for k in clients}, clients)
    if adv is None:
        return None
    alive = sorted(adv)
    directory = server.directory({k: adv[k]["adv"] for k in alive})
    keys = call("secagg.keys", {k: {"session": session, "directory": directory} for k in alive},
                alive)
    if keys is None:
        return None
    u2 = sorted(keys)
    relayed = server.relay(keys)
    segments = {k: [(length, [v for v in u2 if v != k])] for k in u2}
    up = call("secagg.upload", {k: {"session": session, "received": relayed[k],
                                    "segments": segments[k]} for k in u2}, u2)
    if up is None:
        return None
    total = server.unmask(call, session, instance, directory, u2, {k: r["masked"] for k, r in up.items()},
                          {k: [(0, length)] for k in up}, segments, length)
    return None if total is None else (total, sorted(up))
