"""Signed CKKS contributions: a key holder decrypts only a sum it can check is the sum of the
contributions it was meant to be.

Every client holds the CKKS secret key, so a client that decrypts whatever the server hands it
is a decryption oracle: the server could hand it another client's unsummed ciphertext, a sum
over fewer contributors, or a block of an older session, and read the result through what the
client does next (its plaintext model, its losses and accuracy counts). So the server no longer
adds ciphertexts; it forwards them, signed, and the receiver adds them itself.

**Pre-training blocks.** Contributor ``m`` of block ``b`` signs, with its roster identity
(Ed25519, :mod:`fedgl.privacy.identity`), the statement

    ``σ_m = Sign_m("fedgl/he-block/v1" ‖ session ‖ H(directory) ‖ b ‖ M ‖ H(rows) ‖ f ‖ n ‖ m ‖ H(c_m))``

where ``M`` is the block's sorted member list, ``H(rows)`` the SHA-256 of the global node ids of
its rows (in the plan's order: ascending ids, the same at every member), ``f`` the fixed-point
bits (-1 unpacked), ``n`` the number of values, and ``H(c_m)`` the SHA-256 of its ciphertexts.
The session and the directory hash are those of the authenticated key exchange
(:mod:`fedgl.privacy.secagg`), so a statement holds for one session only.

The server forwards to each receiver ``k`` of block ``b`` the other members' ciphertexts and
signatures. ``k`` checks, before decrypting anything: the contributors are exactly ``M \\ {k}``
(each once, each in this session's directory, ``|M| >= 2``), every signature verifies over
``k``'s own view of ``(session, b, M, rows, f, n)``, and every contribution has as many
ciphertexts as its own. It then adds its own ciphertexts (kept from the upload) and the others'
in member order and decrypts the sum.

**Encrypted models** (``--encrypt-models``). Client ``m``'s update of round ``r`` signs

    ``σ_m = Sign_m("fedgl/he-model/v1" ‖ key id ‖ r ‖ m ‖ c_m ‖ H(Enc(c_m w_m)))``

(the key id names the CKKS key, which outlives a restarted session). The server sends the
round's signed updates as the global model; a client decrypts only when they come from at least
two distinct clients of this session's directory (one, in a one-client federation), all for the
same round under this key, each signature valid; it adds them and divides by ``Σ c_m``. The
two statements have different labels, so pre-training ciphertexts never pass as a model.

Ciphertext addition is exact arithmetic modulo the ciphertext modulus, so the receiver's sum is
the very ciphertext the server's addition gave: honest runs decrypt exactly what they did.

What this rules out: decrypting one client's ciphertext (a block's sum always holds the
receiver's own contribution and every other member's signed one; a model sum at least two
clients' updates), a sum over a subset of a block's planned members, a block of another session
or row set, a model sum mixing rounds, and ciphertexts the server altered or made. What it does
not: the member sets are the server's plan. A server can leave a contributor out of a block *for
every member* (each then signs the smaller set), which makes the receivers' sums smaller as
dropping that client from the run would; and it chooses which signed updates of a round (at
least two, of any round under this key) make a model sum, as dropping clients from a round
would. Nor can it pair one client's rows with other members in a second block plan: the
client records its plan before its ciphertexts leave and refuses any other for the same input
(:meth:`fedgl.privacy.secagg.SecAggClient.enter`).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedgl.federation.protocol import Bytes, Int, Record, Seq, Wire
from fedgl.privacy.identity import AttackDetected, Identity, Roster, frame

#: one forwarded contribution: who signed, its ciphertexts, the signature
CONTRIBUTION = Record({"client": Int(0), "chunks": Seq(Wire("ckks.ciphertext")),
                       "sig": Bytes(128)})


def chunks_digest(chunks: Sequence) -> bytes:
    """SHA-256 of a contribution's serialized ciphertexts (each length-prefixed)."""
    h = hashlib.sha256()
    for c in chunks:
        h.update(len(c.data).to_bytes(8, "little"))
        h.update(c.data)
    return h.digest()


def rows_digest(global_ids: np.ndarray) -> bytes:
    """SHA-256 of a block's rows as global node ids (int64, little-endian, in plan order)."""
    return hashlib.sha256(np.ascontiguousarray(global_ids, dtype="<i8").tobytes()).digest()


@dataclass(frozen=True)
class BlockView:
    """What one member knows of a block: everything the statement binds except the signer and
    its ciphertexts."""

    session: bytes
    dir_hash: bytes
    block_id: int
    members: tuple[int, ...]
    rows: bytes  # rows_digest
    frac_bits: int  # -1 when unpacked
    values: int

    def statement(self, signer: int, digest: bytes) -> bytes:
        return frame(b"fedgl/he-block/v1", self.session, self.dir_hash, self.block_id,
                     frame(*self.members), self.rows, self.frac_bits, self.values, signer,
                     digest)


def sign_contribution(identity: Identity, me: int, view: BlockView, chunks: Sequence) -> bytes:
    """This client's signature on its ciphertexts for ``view``'s block."""
    return identity.sign(view.statement(me, chunks_digest(chunks)))


def check_contributions(roster: Roster, me: int, view: BlockView, own: Sequence,
                        received: Sequence[dict]) -> list[Sequence]:
    """The ciphertext lists to add, in member order (``own`` at this client's place), after
    checking ``received`` (the other members' forwarded contributions) against ``view``.
    Raises :class:`AttackDetected` (one line) on anything else; nothing is decrypted then."""
    where = f"block {view.block_id}"
    others = [m for m in view.members if m != me]
    if me not in view.members or not others:
        raise AttackDetected(f"the HE sum of {where} is not planned over this client and another "
                             "member: decrypting it could reveal a single client's values; the "
                             "run stops")
    got = [int(c["client"]) for c in received]
    if sorted(got) != others:
        raise AttackDetected(f"the HE sum of {where} comes from clients {sorted(got)}, not the "
                             f"planned co-members {others} (a single client's or a partial sum); "
                             "nothing decrypted, the run stops")
    by_client = {int(c["client"]): c for c in received}
    for m in others:
        c = by_client[m]
        if len(c["chunks"]) != len(own):
            raise AttackDetected(f"client {m}'s contribution to {where} has {len(c['chunks'])} "
                                 f"ciphertexts, not {len(own)}; nothing decrypted, the run stops")
        if not roster.verify(m, view.statement(m, chunks_digest(c["chunks"])), c["sig"]):
            raise AttackDetected(f"client {m}'s contribution to {where} is not signed by it for "
                                 "this session, block, member set and rows (altered, replayed or "
                                 "another block's); nothing decrypted, the run stops")
    return [own if m == me else by_client[m]["chunks"] for m in view.members]


# ---------------------------------------------------------------------- encrypted models
def model_statement(key_id: bytes, round: int, signer: int, weight: float,
                    digest: bytes) -> bytes:
    """What client ``signer`` signs for its encrypted update of ``round``."""
    return frame(b"fedgl/he-model/v1", key_id, round, signer, struct.pack("<d", weight), digest)


def sign_model(identity: Identity, me: int, key_id: bytes, round: int, weight: float,
               chunks: Sequence) -> bytes:
    return identity.sign(model_statement(key_id, round, me, weight, chunks_digest(chunks)))


def check_model_sum(roster: Roster, key_id: bytes, members: Sequence[int], parts: Sequence,
                    num_chunks: int) -> None:
    """Check a global model's signed updates (``parts``: :class:`~fedgl.privacy.he.EncryptedModel`
    with ``client``, ``round``, ``sig``) before it is decrypted: at least two distinct clients of
    ``members`` (this session's directory; one when it holds one client), one round, the right
    number of ciphertexts, every signature valid under this key. Raises :class:`AttackDetected`
    (one line) otherwise."""
    signers = [int(p.client) for p in parts]
    need = min(2, len(members))
    if len(set(signers)) != len(signers) or not set(signers) <= set(members) \
            or len(signers) < need:
        raise AttackDetected(f"the encrypted global model is made of updates from {signers}: not "
                             f"at least {need} distinct clients of this session (a single "
                             "client's model or a forged part); nothing decrypted, the run stops")
    if len({int(p.round) for p in parts}) != 1:
        raise AttackDetected("the encrypted global model mixes updates of different rounds; "
                             "nothing decrypted, the run stops")
    for p in parts:
        if len(p.chunks) != num_chunks:
            raise AttackDetected(f"client {p.client}'s encrypted update has {len(p.chunks)} "
                                 f"ciphertexts, not {num_chunks}; nothing decrypted, the run stops")
        if not roster.verify(int(p.client), model_statement(key_id, int(p.round), int(p.client),
                                                            float(p.weight),
                                                            chunks_digest(p.chunks)), p.sig):
            raise AttackDetected(f"client {p.client}'s encrypted update is not signed by it for "
                                 "this key, round and weight (altered or made by the server); "
                                 "nothing decrypted, the run stops")
