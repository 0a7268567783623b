"""Secure summation of FedGCN's pre-training rows: pairwise keys, sealed client-to-client
messages, pairwise additive masks (Bonawitz et al., CCS 2017, without the dropout-recovery
secret sharing), and the row plan that lets the server add rows of the same node without
seeing them.

**Keys.** Every client draws a fresh X25519 key pair per protocol session; the server relays the
public keys (counted by the ledger). Any two clients derive a shared secret with HKDF-SHA256 over
the X25519 agreement, bound to the session and a purpose label. An honest-but-curious server
relays keys faithfully; against an active server the public keys would need authentication
(e.g. a PKI), which is out of scope.

**Sealed messages** (HE key distribution): ChaCha20-Poly1305 under the pairwise key, with the
session and both client ids as associated data. The server relays bytes it cannot open.

**Masks.** For a block of rows shared by contributors C, client a adds
``Σ_{b ∈ C, b ≠ a} ±PRG(k_ab)`` (+ if a < b, - otherwise) to its fixed-point encoding
(``round(v · 2^32)`` in uint64, wrapping mod 2^64). The masks cancel exactly in the sum, so the
server recovers ``Σ_k S_k`` (to 2^-33 per client) and nothing finer. PRG: the ChaCha20 keystream
under the pairwise session key, one stream per pair laid over the blocks the pair shares.

**Row plan.** Row i's contributors ``C_i`` are its owner and the owners of its neighbours; its
receivers ``R_i`` are the contributors that asked for it (1-hop: the owner; 2-hop: all of them),
minus those for which ``--min-contributors`` suppresses it. The server groups rows by (C, R):
every member of a block touches every row in it, so blocks can be masked, or laid out in CKKS
slots, identically by all members, and a block goes back only to clients that asked for every
row in it (no client receives a sum it did not request). Rows touched by a single client that
only it receives are not sent at all: that client already has the full sum.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

FIXED_POINT_BITS = 32
_MASK_LABEL = b"fedgl/mask/v1"
_SEAL_LABEL = b"fedgl/he-key/v1"


# ---------------------------------------------------------------------- pairwise keys
class PairwiseKeys:
    """One client's X25519 key pair for one protocol session."""

    def __init__(self, session: bytes) -> None:
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

        self.session = bytes(session)
        self._private = X25519PrivateKey.generate()
        self.public = self._private.public_key().public_bytes_raw()
        self._cache: dict[tuple[bytes, bytes], bytes] = {}

    def shared_key(self, peer_public: bytes, label: bytes) -> bytes:
        """32 bytes both ends derive: HKDF-SHA256(X25519(own, peer), info=label|session)."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF

        key = (bytes(peer_public), label)
        if key not in self._cache:
            secret = self._private.exchange(X25519PublicKey.from_public_bytes(bytes(peer_public)))
            self._cache[key] = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                                    info=label + b"|" + self.session).derive(secret)
        return self._cache[key]

    def seal(self, peer_public: bytes, plaintext: bytes, sender: int, recipient: int) -> bytes:
        """Authenticated encryption to one peer (nonce || ciphertext || tag)."""
        from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

        nonce = os.urandom(12)
        aad = self.session + sender.to_bytes(4, "little") + recipient.to_bytes(4, "little")
        return nonce + ChaCha20Poly1305(self.shared_key(peer_public, _SEAL_LABEL)).encrypt(
            nonce, plaintext, aad)

    def open(self, peer_public: bytes, sealed: bytes, sender: int, recipient: int) -> bytes:
        from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

        aad = self.session + sender.to_bytes(4, "little") + recipient.to_bytes(4, "little")
        return ChaCha20Poly1305(self.shared_key(peer_public, _SEAL_LABEL)).decrypt(
            sealed[:12], sealed[12:], aad)

    def mask(self, peer_public: bytes, count: int) -> np.ndarray:
        """``count`` pseudo-random uint64 values shared with one peer in this session: the
        ChaCha20 keystream under the pairwise key (fresh per session, used once)."""
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

        enc = Cipher(algorithms.ChaCha20(self.shared_key(peer_public, _MASK_LABEL), bytes(16)),
                     mode=None).encryptor()
        return np.frombuffer(enc.update(bytes(8 * count)), dtype=np.uint64)


# ---------------------------------------------------------------------- fixed point and masks
def fixed_point_limit(members: int) -> float:
    """Largest |value| a client may encode so that a sum over ``members`` fits int64."""
    return 2.0 ** (62 - FIXED_POINT_BITS - max(members - 1, 1).bit_length())


def encode_fixed(values: np.ndarray, members: int) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size and float(np.abs(v).max()) >= fixed_point_limit(members):
        raise OverflowError(f"pre-training sums up to {float(np.abs(v).max()):.3g} exceed the "
                            f"masking fixed-point range ({fixed_point_limit(members):.3g})")
    v = v * 2.0 ** FIXED_POINT_BITS
    np.rint(v, out=v)
    return v.astype(np.int64).view(np.uint64)


def decode_fixed(total: Tensor) -> Tensor:
    """int64 sums of fixed-point values (two's complement, i.e. mod 2^64) -> float32."""
    return total.to(torch.float64).mul_(2.0 ** -FIXED_POINT_BITS).to(torch.float32)


def mask_rows(values: np.ndarray, block_sizes: np.ndarray, block_peers: list[np.ndarray],
              keys: PairwiseKeys, me: int, peers: Mapping[int, bytes]) -> np.ndarray:
    """One client's masked upload: ``values`` (its rows of all its blocks, in plan order, d
    columns) in fixed point, plus for every peer one keystream laid over the blocks the two
    share, in plan order (both ends enumerate the same positions), added if ``me < peer`` and
    subtracted otherwise."""
    d = values.shape[1] if values.ndim == 2 else 1
    largest = max((len(p) for p in block_peers), default=0) + 1
    out = encode_fixed(values, largest)
    lengths = np.asarray(block_sizes, dtype=np.int64) * d
    starts = np.cumsum(lengths) - lengths
    spans: dict[int, list[tuple[int, int]]] = {p: [] for p in peers}
    for start, length, members in zip(starts.tolist(), lengths.tolist(), block_peers,
                                      strict=True):
        for p in members.tolist():
            spans[p].append((start, length))
    for peer, public in peers.items():
        spans[peer] = _merge(spans[peer])
        stream = keys.mask(public, sum(n for _, n in spans[peer]))
        op = np.add if me < peer else np.subtract  # uint64: wraps mod 2^64
        offset = 0
        for start, length in spans[peer]:
            view = out[start:start + length]
            op(view, stream[offset:offset + length], out=view)
            offset += length
    return out


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Join adjacent (start, length) spans (blocks are ordered by member set, so a pair's
    shared blocks are often consecutive)."""
    out: list[tuple[int, int]] = []
    for start, length in spans:
        if out and out[-1][0] + out[-1][1] == start:
            out[-1] = (out[-1][0], out[-1][1] + length)
        else:
            out.append((start, length))
    return out


# ---------------------------------------------------------------------- the row plan
@dataclass
class Block:
    """Rows (indices into the plan's sorted unique ids) with the same contributors and
    receivers. ``positions[k]``: each row's position in client k's list of touched rows."""

    members: list[int]
    receivers: list[int]
    rows: Tensor
    positions: dict[int, Tensor] = field(default_factory=dict)


@dataclass
class RowPlan:
    uniq: Tensor                       # sorted global ids of all touched rows
    inverse: dict[int, Tensor]         # per client: index into uniq of each touched row
    requested: dict[int, int]          # per client: how many leading touched rows it asked for
    use_own: dict[int, Tensor]         # per client, per requested row: fill with own partial sum
    blocks: list[Block]

    def blocks_of(self, k: int) -> list[int]:
        """Indices of the blocks client k contributes to, in plan order."""
        return [b for b, blk in enumerate(self.blocks) if k in blk.positions]

    def suppressed(self) -> int:
        return sum(int(u.sum()) for u in self.use_own.values())


def plan_rows(ids: Mapping[int, Tensor], requested: Mapping[int, int],
              counts: Mapping[int, Tensor] | None, min_contributors: int,
              skip_local: bool) -> RowPlan:
    """Group rows by (contributors, receivers); see the module docstring.

    ``counts[k][r]`` is how many of client k's own nodes contribute to its r-th touched row
    (needed only for ``min_contributors > 1``): a receiver's row is suppressed when it holds
    between 1 and ``min_contributors - 1`` remote nodes.
    """
    clients = sorted(ids)
    all_ids = torch.cat([ids[k] for k in clients])
    uniq, inverse = torch.unique(all_ids, return_inverse=True)
    owner = torch.cat([torch.full((len(ids[k]),), k, dtype=torch.long) for k in clients])
    position = torch.cat([torch.arange(len(ids[k])) for k in clients])
    is_req = torch.cat([torch.arange(len(ids[k])) < requested[k] for k in clients])
    receiver = is_req.clone()
    if min_contributors > 1:
        if counts is None:
            raise ValueError("min_contributors > 1 needs per-row contributor counts")
        c = torch.cat([counts[k].long() for k in clients])
        total = torch.zeros(len(uniq), dtype=torch.long).index_add_(0, inverse, c)
        remote = total[inverse] - c
        receiver &= ~((remote > 0) & (remote < min_contributors))
    n_members = torch.bincount(inverse, minlength=len(uniq))
    n_receivers = torch.bincount(inverse[receiver], minlength=len(uniq))
    local_row = (n_members == 1) if skip_local else torch.zeros(len(uniq), dtype=torch.bool)
    use_own_pair = is_req & (~receiver | local_row[inverse])
    # Set fingerprints: sums of two independent random 40-bit tags per client (exact up to a
    # ~2^-80 collision chance), plus the set sizes.
    gen = torch.Generator().manual_seed(20240601)
    top = max(clients) + 1
    tags = torch.randint(0, 2 ** 40, (2, top), generator=gen)
    zero = torch.zeros(len(uniq), dtype=torch.long)
    keys = [zero.clone().index_add_(0, inverse, tags[j][owner]) for j in range(2)]
    keys += [zero.clone().index_add_(0, inverse[receiver], tags[j][owner[receiver]])
             for j in range(2)]
    keys += [n_members, n_receivers]
    sent = (n_receivers > 0) & ~local_row
    key = torch.stack(keys, dim=1)[sent]
    rows_sent = torch.nonzero(sent).flatten()
    blocks: list[Block] = []
    if rows_sent.numel():
        _, group = torch.unique(key, dim=0, return_inverse=True)
        order = torch.argsort(group * len(uniq) + rows_sent)  # by block, then by row
        group, rows_sent = group[order], rows_sent[order]
        bounds = torch.cumsum(torch.bincount(group), 0).tolist()
        pair_key = inverse * top + owner  # sortable (row, client) key
        sort_pk, perm = torch.sort(pair_key)
        start = 0
        for end in bounds:
            rows = rows_sent[start:end]
            start = end
            lo, hi = torch.searchsorted(sort_pk, torch.stack([rows[0] * top, (rows[0] + 1) * top]))
            pairs = perm[lo:hi]
            members = sorted(owner[pairs].tolist())
            receivers = sorted(owner[pairs[receiver[pairs]]].tolist())
            blk = Block(members, receivers, rows)
            for k in members:
                idx = perm[torch.searchsorted(sort_pk, rows * top + k)]
                blk.positions[k] = position[idx]
            blocks.append(blk)
        blocks.sort(key=lambda b: (b.members, b.receivers))  # groups pairs' shared blocks
    use_own, offset = {}, 0
    for k in clients:
        n = len(ids[k])
        use_own[k] = use_own_pair[offset:offset + requested[k]].clone()
        offset += n
    split = torch.split(inverse, [len(ids[k]) for k in clients])
    return RowPlan(uniq, dict(zip(clients, split, strict=True)), dict(requested), use_own, blocks)
