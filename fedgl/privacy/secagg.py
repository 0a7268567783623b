"""Authenticated secure aggregation for any sum: the client side (:class:`SecAggClient`, used
by a client through the :class:`SecureSumParty` mixin); the server side is
:mod:`fedgl.privacy.secagg_server` (:class:`SecureSumServer`, :func:`secure_vector_sum`).

Inputs are real vectors in fixed point (``round(v · 2^32)`` in uint64, wrapping mod 2^64).
A client's vector is laid out in *segments*, each with the peers that contribute to the same
positions (FedGCN's row blocks; one segment shared by everyone for a model average). Two modes:

``mask`` (cheaper; no dropout recovery). Client u uploads ``y_u = x_u + Σ_v ±PRG(k_uv)`` over the
segments it shares with v (+ if u < v), so ``Σ_u y_u = Σ_u x_u`` exactly. Every session must
include every roster client: a missing one aborts the sum (an honest dropout cannot be told from
a server that re-runs the sum without a client to learn its input by differencing).

``robust`` (Bonawitz et al., CCS 2017, double masking). ``y_u = x_u + PRG(b_u) + Σ_v ±PRG(k_uv)``;
u Shamir-shares its self-mask seed ``b_u`` and its mask key ``s_u`` among the participants with
threshold t (encrypted to each peer under a pairwise key, relayed by the server). Survivors U3
(who uploaded) sign U3; once a client has seen t signatures on the same U3 it reveals, for each
u in U3, its share of ``b_u``, and for each dropped u, its share of ``s_u`` — never both for one
u in one session. The server removes survivors' self masks and dropped clients' pairwise masks
and gets ``Σ_{u ∈ U3} x_u``. With ≤ n − t dropouts the sum is exact; with more, the run stops.

One aggregate per input (both modes, and HE's signed uploads; :mod:`fedgl.privacy.inputs`).
Each client names its input by content (``input_id``) and keeps, in its own record, the one
aggregate the input entered: the clients summed and, per segment, the co-members and values.
``mask`` commits when it uploads (every upload of a complete session is summed), HE before its
ciphertexts leave (:meth:`SecAggClient.enter`: every receiver of a block may decrypt its sum
once they have), ``robust`` when it reveals its shares (a
session nobody revealed for is never unmasked, so a dropout's restart may re-sum the input). A
later session may ask for the same aggregate again (it reveals the same sums); any other is
refused before a masked value or a share leaves. Robust commits at the reveal and not at the
signature: a client that signed U3 but was not asked to reveal is in a sum it did not record,
but at least t > n/2 clients revealed and recorded it, so fewer than t remain free to form a
second sum.

Authentication (both modes). Every client's ephemeral X25519 keys (``c`` for encrypting shares
and sealed messages, ``s`` for masks) are signed with its roster identity (Ed25519,
:mod:`fedgl.privacy.identity`). A client checks the directory the server hands it: ids in the
roster, no duplicates, the expected set (all of the roster for ``mask``, at least t for
``robust``), every key signed, its own key unchanged. All derived keys bind the SHA-256 of the
whole directory through HKDF, and every pair confirms its keys (an HMAC tag relayed by the
server) before any masked value leaves a client: a substituted or phantom key, or different
directories handed to different clients, stop the run with :class:`AttackDetected`.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from fedgl.errors import ConfigError, RunAborted
from fedgl.federation.protocol import Any_, Bytes, Int, MapOf, Record, Seq, Str, handles
from fedgl.privacy.identity import (
    AttackDetected,
    Identity,
    Roster,
    frame,
    shamir_split,
)
from fedgl.privacy.inputs import InputRecord, aggregate_id, digest, short, values_hash
from fedgl.privacy.policy import (
    DROPOUT_RECOVERY,
    KEY_EXCHANGE,
    SECURE_MODEL_SUMS,
    ClientPolicy,
)

#: a secure sum whose instance starts with this sums the clients' evaluation counts
EVAL_INSTANCE = "eval/"
MODES = ("mask", "robust", "auth")  # auth: authenticated keys and sealing only (HE), no masks
FIXED_POINT_BITS = 32
Segments = Sequence[tuple[int, Sequence[int]]]  # (length, peers) in upload order


class NonFiniteInput(RunAborted):
    """A secure-sum input holds NaN or ±inf (refused before fixed-point encoding)."""


# ---------------------------------------------------------------------- primitives
def _hkdf(secret: bytes, info: bytes) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(secret)


def prg(key: bytes, count: int) -> np.ndarray:
    """``count`` uint64 words of the ChaCha20 keystream under ``key`` (zero nonce; every key
    is used for one stream only)."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

    enc = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor()
    return np.frombuffer(enc.update(bytes(8 * count)), dtype=np.uint64).copy()


def _x25519_pair():
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    key = X25519PrivateKey.generate()
    return key, key.public_key().public_bytes_raw()


def _exchange(private, public: bytes) -> bytes:
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey

    return private.exchange(X25519PublicKey.from_public_bytes(bytes(public)))


def mask_key(s_private, peer_s_public: bytes, session: bytes, dir_hash: bytes, u: int,
             v: int) -> bytes:
    """Pairwise mask key ``k_uv = HKDF(X25519(s_u, s_v), session ‖ H(directory) ‖ ids)``."""
    return _hkdf(_exchange(s_private, peer_s_public),
                 frame(b"fedgl/mask/v2", session, dir_hash, min(u, v), max(u, v)))


def fixed_point_limit(members: int) -> float:
    """Largest |value| a client may encode so that a sum over ``members`` fits int64."""
    return 2.0 ** (62 - FIXED_POINT_BITS - max(members - 1, 1).bit_length())


def refuse_non_finite(v: np.ndarray) -> None:
    """One-line :class:`NonFiniteInput` for NaN/inf (which would pass a range check and wrap)."""
    if v.size and not bool(np.isfinite(v).all()):
        raise NonFiniteInput(f"a secure-sum input holds {int((~np.isfinite(v)).sum())} non-finite "
                             "values (NaN or inf), refused before encoding; lower the learning "
                             "rate or check the features for NaN")


def encode_fixed(values: np.ndarray, members: int) -> np.ndarray:
    """``round(v · 2^32)`` as uint64 (two's complement). Refuses NaN/inf and out-of-range
    values with a one-line error (NaN would otherwise pass the range check and wrap)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    refuse_non_finite(v)
    if v.size and float(np.abs(v).max()) >= fixed_point_limit(members):
        raise OverflowError(f"secure-sum inputs up to {float(np.abs(v).max()):.3g} exceed the "
                            f"masking fixed-point range ({fixed_point_limit(members):.3g})")
    v = v * 2.0 ** FIXED_POINT_BITS
    np.rint(v, out=v)
    return v.astype(np.int64).view(np.uint64)


def decode_fixed(total: np.ndarray) -> np.ndarray:
    """uint64/int64 sums of fixed-point values (mod 2^64) -> float64."""
    return np.asarray(total).view(np.int64).astype(np.float64) * 2.0 ** -FIXED_POINT_BITS


def pair_spans(segments: Segments, peer: int) -> list[tuple[int, int]]:
    """(start, length) of the positions of an upload whose segment lists ``peer``, merged."""
    out: list[tuple[int, int]] = []
    start = 0
    for length, peers in segments:
        if peer in peers and length:
            if out and out[-1][0] + out[-1][1] == start:
                out[-1] = (out[-1][0], out[-1][1] + length)
            else:
                out.append((start, length))
        start += length
    return out


def apply_pair_mask(out: np.ndarray, spans: list[tuple[int, int]], key: bytes, add: bool) -> None:
    """Add (or subtract) one pair's keystream over its spans, in place, mod 2^64."""
    stream = prg(key, sum(n for _, n in spans))
    op = np.add if add else np.subtract
    offset = 0
    for start, length in spans:
        view = out[start:start + length]
        op(view, stream[offset:offset + length], out=view)
        offset += length


# ---------------------------------------------------------------------- client side
@dataclass
class _Session:
    session: bytes
    instance: str  # the sum's label (signed; the same at every client)
    input_id: str  # what this client's input is (one robust sum per input)
    c_key: object
    s_key: object
    advert: dict
    dir_hash: bytes = b""
    directory: dict = field(default_factory=dict)  # id -> (c, s)
    enc: dict = field(default_factory=dict)
    conf: dict = field(default_factory=dict)
    masks: dict = field(default_factory=dict)
    self_seed: bytes = b""
    shares_b: dict = field(default_factory=dict)  # u -> my share of b_u
    shares_s: dict = field(default_factory=dict)  # u -> my share of s_u
    u2: frozenset = frozenset()
    u3: frozenset | None = None
    revealed: bool = False
    refused: bool = False  # this client refused the survivor set: never unmasked
    segments: list = field(default_factory=list)  # co-members of each uploaded segment
    layout: list = field(default_factory=list)  # (length, co-members) of every segment
    values: bytes | None = None  # names what was uploaded: its values or selection (aggregate id)
    #: the inputs this upload holds, committed together (default: ``input_id`` alone)
    consumes: tuple[str, ...] = ()

    def inputs(self) -> tuple[str, ...]:
        return self.consumes or (self.input_id,)


class SecAggClient:
    """One client's side of the protocol; holds its identity and the roster."""

    def __init__(self, me: int, identity: Identity, roster: Roster, mode: str = "mask",
                 threshold: int = 0, record: InputRecord | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown secure-sum mode {mode!r}")
        self.me, self.identity, self.roster, self.mode = me, identity, roster, mode
        n = len(roster.ids)
        if threshold and not n // 2 < threshold <= n:
            # the client's own safety rule, whoever set the value: with t <= n/2 a server can
            # collect both kinds of shares of one client from two disjoint survivor sets
            raise ConfigError(f"secure-sum threshold {threshold} of {n} clients is unsafe: it "
                              f"must be above n/2 and at most n ({n // 2 + 1}..{n})")
        self.threshold = threshold or default_threshold(n)
        self._st: _Session | None = None
        #: the party's record of the aggregate each input entered (in memory if not given)
        self.record = record if record is not None else InputRecord()

    # -- step 0: advertise signed ephemeral keys
    def advertise(self, session: bytes, instance: str, input_id: str | None = None,
                  consumes: Sequence[str] | None = None) -> dict:
        """Fresh signed ephemeral keys for the sum ``instance``. ``input_id`` names this
        client's input by content (default: the instance): it enters one aggregate only.
        ``consumes``: where the upload holds several inputs (a model update and the counts of
        the model it started from), their names; each enters this one aggregate only."""
        c_key, c_pub = _x25519_pair()
        s_key, s_pub = _x25519_pair()
        sig = self.identity.sign(frame(b"fedgl/adv/v2", session, instance, self.me, c_pub, s_pub))
        advert = {"c": c_pub, "s": s_pub, "sig": sig}
        self._st = _Session(bytes(session), instance, input_id or instance, c_key, s_key, advert,
                            consumes=tuple(consumes or ()))
        return dict(advert)

    def current(self, session: bytes) -> _Session | None:
        st = self._st
        return st if st is not None and st.session == bytes(session) else None

    # -- step 1: check the directory, derive keys, confirm, share secrets
    def keys(self, session: bytes, directory: Mapping) -> dict:
        st = self._require(session)
        self._check_directory(st, directory)
        me = self.me
        for v, (c, s) in st.directory.items():
            if v == me:
                continue
            ids = (min(me, v), max(me, v))
            c_secret = _exchange(st.c_key, c)
            st.enc[v] = _hkdf(c_secret, frame(b"fedgl/enc/v2", st.session, st.dir_hash, *ids))
            st.conf[v] = _hkdf(c_secret, frame(b"fedgl/confirm/v2", st.session, st.dir_hash, *ids))
            st.masks[v] = mask_key(st.s_key, s, st.session, st.dir_hash, me, v)
        out: dict = {"confirm": {v: self._tag(st, me, v) for v in st.conf}}
        if self.mode == "robust":
            st.self_seed = os.urandom(32)
            holders = sorted(st.directory)
            sb = shamir_split(st.self_seed, holders, self.threshold)
            ss = shamir_split(st.s_key.private_bytes_raw(), holders, self.threshold)
            st.shares_b[me], st.shares_s[me] = sb[me], ss[me]
            out["shares"] = {v: self._seal_to(st, v, frame(me, v, sb[v], ss[v]), b"shares")
                             for v in st.enc}
        return out

    def _check_directory(self, st: _Session, directory: Mapping) -> None:
        ids = [int(k) for k in directory["ids"]]
        if len(set(ids)) != len(ids):
            raise AttackDetected("the key directory lists a client twice (a phantom party added "
                                 "by the server); the run stops")
        unknown = sorted(set(ids) - set(self.roster.ids))
        if unknown:
            raise AttackDetected(f"the key directory lists ids {unknown} that are not in the "
                                 "roster (a phantom party added by the server); the run stops")
        entries = dict(zip(ids, zip(directory["c"], directory["s"], directory["sig"],
                                    strict=True), strict=True))
        for k, (c, s, sig) in entries.items():
            if not self.roster.verify(k, frame(b"fedgl/adv/v2", st.session, st.instance, k, c, s),
                                      sig):
                raise AttackDetected(f"the key listed for client {k} is not signed by its roster "
                                     "identity (a substituted key); the run stops")
        mine = entries.get(self.me)
        if mine is None or (bytes(mine[0]), bytes(mine[1])) != (st.advert["c"], st.advert["s"]):
            raise AttackDetected("the key directory leaves out or replaces this client's own key; "
                                 "the run stops")
        members = frozenset(ids)
        if self.mode == "mask" and members != frozenset(self.roster.ids):
            missing = sorted(set(self.roster.ids) - members)
            raise RunAborted(f"secure sum 'mask' needs every roster client, but {missing} are "
                             "missing: without dropout recovery a sum re-run without a client "
                             "would reveal that client's input; use the robust secure sum")
        if self.mode == "robust" and len(members) < self.threshold:
            raise RunAborted(f"only {len(members)} clients in the secure sum, below the threshold "
                             f"{self.threshold}: the sum cannot be unmasked safely; the run stops")
        for name in st.inputs():
            prior = self.record.aggregate_of(name)
            if prior is not None and (not set(prior["members"]) <= members
                                      if self.mode == "robust"
                                      else set(prior["members"]) != members):
                raise AttackDetected(f"a second secure sum over the same values "
                                     f"('{short(name)}') with other clients: differencing "
                                     "the two sums would reveal a client's input; the run stops")
        st.directory = {k: (bytes(c), bytes(s)) for k, (c, s, _) in entries.items()}
        st.dir_hash = directory_hash(st.session, st.instance, directory)

    def _tag(self, st: _Session, sender: int, recipient: int) -> bytes:
        key = st.conf[recipient if sender == self.me else sender]
        return hmac.new(key, frame(b"confirm", sender, recipient, st.dir_hash),
                        hashlib.sha256).digest()[:16]

    def _seal_to(self, st: _Session, v: int, plaintext: bytes, purpose: bytes) -> bytes:
        from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

        nonce = os.urandom(12)
        aad = frame(purpose, st.session, st.dir_hash, self.me, v)
        return nonce + ChaCha20Poly1305(st.enc[v]).encrypt(nonce, plaintext, aad)

    def _open_from(self, st: _Session, v: int, sealed: bytes, purpose: bytes) -> bytes:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

        if v not in st.enc:
            raise AttackDetected(f"a sealed message claims to come from client {v}, which is not in "
                                 "this session's directory; the run stops")
        aad = frame(purpose, st.session, st.dir_hash, v, self.me)
        try:
            return ChaCha20Poly1305(st.enc[v]).decrypt(bytes(sealed[:12]), bytes(sealed[12:]), aad)
        except InvalidTag:
            raise AttackDetected(f"a message sealed by client {v} does not open (altered, or keys "
                                 "from different directories); the run stops") from None

    def seal(self, session: bytes, recipient: int, plaintext: bytes) -> bytes:
        """Authenticated encryption to one peer of the checked directory (e.g. the HE key)."""
        return self._seal_to(self._require(session), recipient, plaintext, b"seal")

    def open(self, session: bytes, sender: int, sealed: bytes) -> bytes:
        return self._open_from(self._require(session), sender, sealed, b"seal")

    # -- step 2: confirm peers' keys, take shares, upload the masked input
    def accept(self, session: bytes, confirm: Mapping[int, bytes],
               shares: Mapping[int, bytes] | None = None) -> None:
        """Check every peer's key-confirmation tag (and, robust, open the shares it sent)."""
        st = self._require(session)
        if self.mode == "robust":
            u2 = frozenset(int(v) for v in (shares or {})) | {self.me}
            if not u2 <= set(st.directory) or len(u2) < self.threshold:
                raise AttackDetected("the server forwarded shares from clients outside the "
                                     "directory, or fewer than the threshold; the run stops")
        else:
            u2 = frozenset(st.directory)
        for v in sorted(u2 - {self.me}):
            tag = confirm.get(v)
            if tag is None or not hmac.compare_digest(bytes(tag), self._tag(st, v, self.me)):
                raise AttackDetected(f"key confirmation with client {v} failed: the two hold "
                                     "different key directories (a substituted or phantom key); "
                                     "the run stops")
        if self.mode == "robust":
            for v in sorted(u2 - {self.me}):
                body = self._open_from(st, v, shares[v], b"shares")
                parts = _unframe(body)
                if len(parts) != 4 or int.from_bytes(parts[0], "little") != v \
                        or int.from_bytes(parts[1], "little") != self.me:
                    raise AttackDetected(f"the shares from client {v} are addressed to someone "
                                         "else; the run stops")
                st.shares_b[v], st.shares_s[v] = parts[2], parts[3]
        st.u2 = u2

    def enter(self, session: bytes, segments: Segments, selection: np.ndarray) -> None:
        """HE (mode ``auth``): record that this client's input enters the sums laid out in
        ``segments`` (its blocks: length and co-members) over this session's directory,
        ``selection`` naming the rows picked from the named input, before its signed
        ciphertexts leave. Once they have left, every receiver of a block may decrypt that
        block's sum, so the upload commits (as ``mask`` does): the same aggregate asked again
        is served, any other raises :class:`~fedgl.privacy.inputs.InputReused`."""
        st = self._require(session)
        members = sorted(st.directory)
        st.layout = [(int(n), sorted(int(p) for p in ps)) for n, ps in segments]
        st.values = digest("selection", np.asarray(selection)).encode()
        self.record.commit(st.inputs(), aggregate_id("he", members, st.layout, st.values),
                           members, "this client's input")

    def mask(self, session: bytes, values: np.ndarray, segments: Segments,
             selection: np.ndarray | None = None) -> np.ndarray:
        """The masked upload of ``values`` (flat, laid out in ``segments``). ``selection``: how
        the caller picked ``values`` from its named input (e.g. FedGCN's plan rows); the
        aggregate id then names it instead of hashing the values, which the input's name
        already determines."""
        st = self._require(session)
        if self.mode == "auth":
            raise RunAborted("this client was provisioned for authenticated key exchange only, "
                             "not for masked sums")
        if not st.u2:
            raise AttackDetected("asked to upload before keys were confirmed; the run stops")
        flat = np.asarray(values, dtype=np.float64).ravel()
        if sum(n for n, _ in segments) != flat.size:
            raise AttackDetected("the upload plan does not cover this client's values; the run "
                                 "stops")
        peers = set()
        for length, ps in segments:
            ps = {int(p) for p in ps}
            if length and (not ps or self.me in ps):
                raise AttackDetected("the plan asks for a segment without co-members: it could "
                                     "not be masked and would reach the server in clear; the run "
                                     "stops")
            peers |= ps
        if not peers <= st.u2:
            raise AttackDetected(f"the plan pairs this client with {sorted(peers - st.u2)}, who "
                                 "are not in the confirmed directory; the run stops")
        st.segments = [frozenset(int(p) for p in ps) for n, ps in segments if n]
        st.layout = [(int(n), sorted(int(p) for p in ps)) for n, ps in segments]
        largest = max((len(ps) for _, ps in segments), default=0) + 1
        out = encode_fixed(flat, largest)
        st.values = values_hash(out) if selection is None else \
            digest("selection", np.asarray(selection)).encode()
        if self.mode == "mask":  # every upload of a complete session is summed: commit now
            self.record.commit(st.inputs(), aggregate_id("mask", sorted(st.u2), st.layout,
                                                         st.values), st.u2, "this client's input")
        for v in sorted(peers):
            apply_pair_mask(out, pair_spans(segments, v), st.masks[v], self.me < v)
        if self.mode == "robust":
            np.add(out, prg(st.self_seed, out.size), out=out)
        return out

    # -- steps 3 and 4 (robust): agree on the survivors, then reveal one kind of share each
    def consistency(self, session: bytes, survivors: Sequence[int]) -> dict:
        st = self._require(session)
        u3 = frozenset(int(k) for k in survivors)
        if st.u3 is not None:
            raise AttackDetected("asked twice for the survivor set of one session; the run stops")
        if not u3 <= st.u2 or self.me not in u3 or len(u3) < self.threshold:
            raise AttackDetected(f"the claimed survivor set {sorted(u3)} is not a subset of the "
                                 f"session's clients containing this one, or is below the "
                                 f"threshold {self.threshold}; the run stops")
        for name in st.inputs():
            prior = self.record.aggregate_of(name)
            if prior is not None and set(prior["members"]) != u3:
                raise AttackDetected(f"a second secure sum over the same values "
                                     f"('{short(name)}') with other survivors {sorted(u3)} (it "
                                     f"was summed with {prior['members']}): differencing the "
                                     "two sums would reveal a client's input; the run stops")
        st.u3 = u3
        if any(not (ps & u3) for ps in st.segments):
            # every co-member of a segment gone (claimed or real): unmasking would hand the
            # server this client's values of that segment alone. No signature: this session
            # is never unmasked (every survivor must sign), so a new one may sum these values.
            st.refused = True
            return {"stale": True, "refused": f"client {self.me} will not sign survivors "
                    f"{sorted(u3)}: a part of its upload would have no other contributor"}
        return {"sig": self.identity.sign(_u3_message(st, u3))}

    def unmask(self, session: bytes, signatures: Mapping[int, bytes]) -> dict:
        st = self._require(session)
        if st.u3 is None or st.revealed or st.refused:
            raise AttackDetected("asked to reveal shares twice, before agreeing on the "
                                 "survivors, or after refusing them; the run stops")
        msg = _u3_message(st, st.u3)
        valid = {int(k) for k, sig in signatures.items()
                 if int(k) in st.u3 and self.roster.verify(int(k), msg, sig)}
        if valid != st.u3:
            # every survivor must agree: a survivor refuses to sign a set that would expose a
            # part of its upload, and the server may not unmask over its head. Nothing is
            # revealed; the server may start a new session (a client that vanished while the
            # survivors agreed ends up here too).
            st.refused = True
            return {"stale": True, "refused": f"client {self.me} reveals no shares: only "
                    f"{len(valid)} of the {len(st.u3)} survivors signed the survivor set"}
        if st.values is None:
            raise AttackDetected("asked to reveal shares for a session this client uploaded "
                                 "nothing in; the run stops")
        # the sum revealed: the survivors' inputs (dropped clients' masks are removed)
        self.record.commit(st.inputs(), aggregate_id("robust", sorted(st.u3), st.layout,
                                                     st.values), st.u3, "this client's input")
        st.revealed = True
        return {"b": {u: st.shares_b[u] for u in sorted(st.u3)},
                "s": {u: st.shares_s[u] for u in sorted(st.u2 - st.u3)}}

    def _require(self, session: bytes) -> _Session:
        st = self.current(session)
        if st is None:
            raise AttackDetected("a message for a session this client did not start (a replay); "
                                 "the run stops")
        return st


def _u3_message(st: _Session, u3: frozenset) -> bytes:
    return frame(b"fedgl/survivors/v2", st.session, st.dir_hash, *sorted(u3))


def _unframe(data: bytes) -> list[bytes]:
    out, i = [], 0
    while i + 4 <= len(data):
        n = int.from_bytes(data[i:i + 4], "little")
        out.append(data[i + 4:i + 4 + n])
        i += 4 + n
    return out


def default_threshold(n: int) -> int:
    """t = ⌊n/2⌋ + 1: two different survivor sets can never both collect t signatures."""
    return n // 2 + 1


# ---------------------------------------------------------------------- the party mixin
#: payload schemas of the secure-sum messages (their contents are also authenticated: every key
#: is signed by its roster identity, every share sealed to its recipient)
SESSION = Bytes(max_len=64)
CLIENT_IDS = Seq(Int(0), max_len=1 << 20)
DIRECTORY = Record({"ids": CLIENT_IDS, "c": Seq(Bytes(64)), "s": Seq(Bytes(64)),
                    "sig": Seq(Bytes(256))})
RECEIVED = Record({"confirm": MapOf(Int(0), Bytes(64)),
                   "shares": MapOf(Int(0), Bytes(1 << 16))}, optional=("shares",))
SEGMENTS = Seq(Seq(Any_(), max_len=2))


class SecureSumParty:
    """Runtime-callable secure-sum steps for a client class. The client sets ``self.secagg``
    (via :meth:`install_identity`) and implements :meth:`secagg_input` for generic sums."""

    secagg: SecAggClient | None = None
    #: under HE (``auth``), the mask-mode client of the evaluation sums (:data:`EVAL_INSTANCE`)
    eval_agg: SecAggClient | None = None
    secure_models: bool = False
    #: the party's own safety policy (:mod:`fedgl.privacy.policy`); a client class sets it
    policy: ClientPolicy = ClientPolicy()

    def protocol_tags(self) -> frozenset[str]:
        """The kinds of protocol step this party's policy takes (its endpoint serves those)."""
        return self.policy.message_tags()

    def install_identity(self, identity: Identity, roster: Roster, mode: str = "mask",
                         threshold: int = 0, secure_models: bool = False) -> None:
        """Provisioning by the experimenter (outside the server): identity key and roster, the
        secure-sum mode, and whether models leave only inside secure sums."""
        self.secagg = SecAggClient(self.client_id_for_secagg(), identity, roster, mode, threshold,
                                   self.input_record())
        self.policy = self.policy.provisioned(mode, secure_models)
        self.secure_models = self.policy.secure_models

    def provision(self, plain: dict) -> None:
        """:meth:`install_identity` from plain data (what a client process receives)."""
        self.install_identity(Identity(plain["key"]), Roster.from_dict(plain["roster"]),
                              plain["mode"], plain["threshold"], plain.get("secure_models", False))

    def client_id_for_secagg(self) -> int:
        return int(self.data.client_id)  # type: ignore[attr-defined]

    def secagg_input(self, instance: str) -> np.ndarray:
        """The vector this party contributes to the sum ``instance`` (each party class that uses
        the secure sum defines it)."""
        raise NotImplementedError(f"{type(self).__name__} contributes no secure sum '{instance}'")

    def secagg_instance(self, instance: str) -> str:
        """The name of this client's input for a sum the server labels ``instance``: by
        content (:mod:`fedgl.privacy.inputs`), whatever the label; here the digest of the
        vector itself."""
        return digest("sum", np.asarray(self.secagg_input(instance), dtype=np.float64))

    def secagg_consumes(self, instance: str) -> tuple[str, ...] | None:
        """Where this client's input for the sum ``instance`` holds several named inputs, their
        names (each enters that sum's aggregate only); None: the input is one
        (:meth:`secagg_instance`)."""
        return None

    def input_record(self) -> InputRecord:
        """This party's record of its inputs: the one given by :meth:`use_input_record` (a
        deployed party's, kept across runs), or one under the configuration's
        ``privacy.state_dir`` (``<dir>/client-<k>``), or in memory."""
        record = self.__dict__.get("_input_record")
        if record is None:
            from fedgl.privacy.inputs import party_record

            config = getattr(self, "config", None)
            record = party_record(getattr(config, "state_dir", None),
                                  self.client_id_for_secagg())
            self._input_record = record
        return record

    def use_input_record(self, record: InputRecord) -> None:
        """Keep this party's record in ``record`` (before :meth:`install_identity`)."""
        self._input_record = record

    def _agg(self, session: bytes | None = None, instance: str | None = None) -> SecAggClient:
        """The secure-sum client of the sum ``instance`` or of the session in progress: the
        evaluation sums' own (:attr:`eval_agg`) where there is one, else the party's."""
        extra = self.eval_agg
        if extra is not None and ((instance or "").startswith(EVAL_INSTANCE) or (
                session is not None and extra.current(session) is not None)):
            return extra
        if self.secagg is None:
            raise RunAborted("this client has no identity key: secure aggregation needs a roster "
                             "(provisioned by the driver or `fedgl keys`)")
        return self.secagg

    @handles("secagg.advertise", schema={"session": SESSION, "instance": Str(max_len=256)},
             needs=SECURE_MODEL_SUMS)
    def secagg_advertise(self, session: bytes, instance: str) -> dict:
        return {"adv": self._agg(instance=instance).advertise(
            session, instance, self.secagg_instance(instance), self.secagg_consumes(instance))}

    @handles("secagg.keys", schema={"session": SESSION, "directory": DIRECTORY},
             needs=KEY_EXCHANGE)
    def secagg_keys(self, session: bytes, directory: dict) -> dict:
        agg = self._agg(session)
        if agg.current(session) is None:
            return {"stale": True}
        return agg.keys(session, directory)

    @handles("secagg.upload", schema={"session": SESSION, "received": RECEIVED,
                                      "segments": SEGMENTS}, needs=SECURE_MODEL_SUMS)
    def secagg_upload(self, session: bytes, received: dict, segments: list) -> dict:
        agg = self._agg(session)
        if agg.current(session) is None:
            return {"stale": True}
        agg.accept(session, received["confirm"], received.get("shares"))
        return {"masked": agg.mask(session, self.secagg_input(agg.current(session).instance),
                                   segments)}

    @handles("secagg.consistency", schema={"session": SESSION, "survivors": CLIENT_IDS},
             needs=DROPOUT_RECOVERY)
    def secagg_consistency(self, session: bytes, survivors: list) -> dict:
        agg = self._agg(session)
        if agg.current(session) is None:  # restarted: the server starts over
            return {"stale": True}
        return agg.consistency(session, survivors)

    @handles("secagg.unmask", schema={"session": SESSION, "signatures": MapOf(Int(0), Bytes(1024))},
             needs=DROPOUT_RECOVERY)
    def secagg_unmask(self, session: bytes, signatures: dict) -> dict:
        agg = self._agg(session)
        if agg.current(session) is None:
            return {"stale": True}
        return agg.unmask(session, signatures)


def directory_hash(session: bytes, instance: str, directory: Mapping) -> bytes:
    """SHA-256 of the whole directory, bound into every pairwise key (the server computes it
    too, to re-derive a dropped client's mask keys from its reconstructed secret)."""
    entries = sorted(zip([int(k) for k in directory["ids"]], directory["c"], directory["s"],
                         directory["sig"], strict=True))
    return hashlib.sha256(frame(b"fedgl/dir/v2", session, instance,
                                *[frame(k, c, s, sig) for k, c, s, sig in entries])).digest()
