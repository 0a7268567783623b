"""Signed CKKS contributions: a key holder decrypts a block only when it can check that it is
the sum of the contributions the block was planned to have.

Every client holds the CKKS secret key, so a client that decrypts whatever the server hands it
is a decryption oracle: the server could hand it another client's unsummed ciphertext, a sum
over fewer contributors, or a block of an older session, and read the result through what the
client does next (its plaintext model). So the server no longer sums; it forwards.

Contributor ``m`` of block ``b`` signs, with its roster identity (Ed25519,
:mod:`fedgl.privacy.identity`), the statement

    ``σ_m = Sign_m("fedgl/he-block/v1" ‖ session ‖ H(directory) ‖ b ‖ M ‖ H(rows) ‖ f ‖ n ‖ m ‖ H(c_m))``

where ``M`` is the block's sorted member list, ``H(rows)`` the SHA-256 of the global node ids of
its rows (in the plan's order: ascending ids, the same at every member), ``f`` the fixed-point
bits (-1 unpacked), ``n`` the number of values, and ``H(c_m)`` the SHA-256 of its ciphertexts.
The session and the directory hash are those of the authenticated key exchange
(:mod:`fedgl.privacy.secagg`), so a statement holds for one session only.

The server forwards to each receiver ``k`` of block ``b`` the other members' ciphertexts and
signatures. ``k`` checks, before decrypting anything: the contributors are exactly ``M \\ {k}``
(each once, each in the roster and this session's directory, ``|M| >= 2``), every signature
verifies over ``k``'s own view of ``(session, b, M, rows, f, n)``, and every contribution has
as many ciphertexts as its own. It then adds its own ciphertexts (kept from the upload) and the
others' in member order and decrypts the sum. Ciphertext addition is exact arithmetic modulo
the ciphertext modulus, so the sum is the same polynomial the server's addition gave: honest
runs decrypt exactly what they decrypted before.

What this rules out: decrypting one client's ciphertext (the receiver's own contribution is
always in the sum, and every other member must have signed for this block), a sum over a
subset of the planned members, a block of another session or another row set, and ciphertexts
the server altered or made. What it does not: the member set is the server's plan; a server can
leave a contributor out of a block *for every member* (each then signs the smaller set), which
makes the receivers' sums smaller, as dropping the contributor from the run would.
"""

from __future__ import annotations

import hashlib
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
