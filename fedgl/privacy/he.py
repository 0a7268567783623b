"""CKKS homomorphic encryption (TenSEAL) with client-held keys.

One designated client (the key holder) creates the CKKS context. The secret key leaves it only
sealed to each roster-authenticated client (X25519 + ChaCha20-Poly1305, :mod:`fedgl.privacy.secagg`),
relayed by the server, which receives a *public* context: the encryption parameters and no key.
With it the server could load and add ciphertexts, and nothing else: it cannot decrypt. The
protocol has it add nothing: it forwards the senders' signed ciphertexts, and each receiver checks
them and adds them itself before it decrypts (:mod:`fedgl.privacy.he_signed`).

Clients encrypt with the secret key (SEAL's symmetric mode), which has ~16x less fresh noise than
public-key encryption and so leaves more room in each slot for packed values.

Two encodings:

* ``pack = 1``: plain CKKS reals at scale ``2^scale_bits`` (one value per slot).
* ``pack = m > 1``: FedGCN appendix G.2's packing, generalised from booleans to fixed-point
  integers (our sums are degree-weighted reals). Each value is rounded to ``f`` fractional bits
  and ``m`` of them are packed into one slot as balanced base-``2^w`` digits of one integer
  ``P = Σ_t a_t 2^{w t}``; ciphertext addition adds the digits, and decoding peels them off again.
  Exact as long as every digit of the *sum* stays within ``±2^{w-1}``, which the protocol ensures
  by choosing ``f`` from the clients' magnitude bounds. The packed integer is encoded at a small
  scale that only has to clear the encryption noise.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedgl import progress
from fedgl._optional import require
from fedgl.federation.codec import WireError, wire_type
from fedgl.privacy.secagg import refuse_non_finite

# Largest total coefficient-modulus bits at the 128-bit classical security level (HE standard,
# as enforced by SEAL's default sec_level_type::tc128), per ring dimension N.
MAX_COEFF_BITS_128 = {1024: 27, 2048: 54, 4096: 109, 8192: 218, 16384: 438, 32768: 881}
MAX_PACK = 4
MIN_FIELD_BITS = 10
DOUBLE_SAFE_BITS = 42  # packed integers stay far below 2^53 so CKKS decoding in doubles is exact


def _ciphertext_from_tree(data: bytes) -> Ciphertext:
    if not isinstance(data, bytes):
        raise WireError("malformed ciphertext")
    return Ciphertext(data)


@wire_type("ckks.ciphertext", lambda c: c.data, _ciphertext_from_tree)
class Ciphertext:
    """One serialized CKKS ciphertext on the wire; the ledger counts its serialized bytes."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)

    def serialized_nbytes(self) -> int:
        return len(self.data)

    def __reduce__(self):  # picklable for process-based runtimes
        return (Ciphertext, (self.data,))


def _model_tree(m: EncryptedModel) -> dict:
    return {"chunks": [c.data for c in m.chunks], "weight": float(m.weight),
            "client": int(m.client), "round": int(m.round), "sig": bytes(m.sig)}


def _model_from_tree(tree: dict) -> EncryptedModel:
    if not (isinstance(tree, dict) and isinstance(tree.get("chunks"), list)
            and all(isinstance(c, bytes) for c in tree["chunks"])
            and isinstance(tree.get("weight"), float)
            and all(isinstance(tree.get(k), int) and not isinstance(tree.get(k), bool)
                    for k in ("client", "round"))
            and isinstance(tree.get("sig"), bytes)):
        raise WireError("malformed encrypted model")
    return EncryptedModel(tuple(Ciphertext(c) for c in tree["chunks"]), tree["weight"],
                          tree["client"], tree["round"], tree["sig"])


@wire_type("ckks.model", _model_tree, _model_from_tree)
@dataclass(frozen=True)
class EncryptedModel:
    """A model (flattened state dict) as CKKS ciphertexts, and the plaintext sum of the
    coefficients it was multiplied by (decrypt, then divide by ``weight``). A client's update
    also names its sender, its round and the sender's signature
    (:func:`fedgl.privacy.he_signed.model_statement`); unsigned: ``client = round = -1``."""

    chunks: tuple[Ciphertext, ...]
    weight: float
    client: int = -1
    round: int = -1
    sig: bytes = b""

    def serialized_nbytes(self) -> int:
        signed = 16 + len(self.sig) if self.sig else 0
        return sum(c.serialized_nbytes() for c in self.chunks) + 8 + signed


def _sum_tree(m: EncryptedModelSum) -> dict:
    return {"parts": [_model_tree(p) for p in m.parts]}


def _sum_from_tree(tree: dict) -> EncryptedModelSum:
    if not (isinstance(tree, dict) and isinstance(tree.get("parts"), list)):
        raise WireError("malformed encrypted model sum")
    return EncryptedModelSum(tuple(_model_from_tree(p) for p in tree["parts"]))


@wire_type("ckks.model_sum", _sum_tree, _sum_from_tree)
@dataclass(frozen=True)
class EncryptedModelSum:
    """The global model of ``--encrypt-models`` as the server sends it: the round's signed
    client updates, which each client checks and adds itself before decrypting
    (:mod:`fedgl.privacy.he_signed`); the server adds nothing."""

    parts: tuple[EncryptedModel, ...]

    def serialized_nbytes(self) -> int:
        return sum(p.serialized_nbytes() for p in self.parts)


@dataclass(frozen=True)
class HEParams:
    """CKKS parameters and the packing geometry derived from them."""

    poly_degree: int = 4096
    coeff_bits: tuple[int, ...] = (60, 49)
    scale_bits: int = 40
    pack: int = 1
    clients: int = 10

    @classmethod
    def from_config(cls, cfg) -> HEParams:
        return cls(cfg.he_poly_degree, parse_coeff_bits(cfg.he_coeff_bits), cfg.he_scale_bits,
                   cfg.he_pack, cfg.clients)

    @property
    def slots(self) -> int:
        return self.poly_degree // 2

    @property
    def data_bits(self) -> int:
        """Bits of the ciphertext modulus at the data level (all primes but the special one)."""
        return sum(self.coeff_bits[:-1])

    @property
    def pack_scale_bits(self) -> int:
        """Scale for packed integers: ~16x above the noise of a sum of K fresh symmetric
        ciphertexts (σ = 3.2, 6σ tail, spread by sqrt(N) in decoding, sqrt(K) over the sum)."""
        noise = 3.2 * 6 * math.sqrt(self.poly_degree) * math.sqrt(max(self.clients, 1))
        return math.ceil(math.log2(noise)) + 4

    @property
    def payload_bits(self) -> int:
        """Bits of signed integer payload per slot in packed mode."""
        return min(self.data_bits - 2 - self.pack_scale_bits, DOUBLE_SAFE_BITS)

    @property
    def field_bits(self) -> int:
        return self.payload_bits // self.pack

    @property
    def real_limit(self) -> float:
        """Largest |value| a sum may reach in real mode without wrapping the modulus."""
        return 2.0 ** (self.data_bits - 2 - self.scale_bits)

    def problems(self) -> str | None:
        """A one-line description of what is wrong (and the fix), or None if usable."""
        n = self.poly_degree
        if n not in MAX_COEFF_BITS_128 or n < 2048:
            return (f"he_poly_degree must be a power of two from 2048 to 32768 (got {n}); "
                    "use e.g. --he-poly-degree 4096")
        if len(self.coeff_bits) < 2:
            return ("he_coeff_bits needs at least two primes (data primes, then the special "
                    "prime), e.g. --he-coeff-bits 60,49")
        if any(not 14 <= b <= 60 for b in self.coeff_bits):
            return f"he_coeff_bits entries must be 14..60 bits (got {list(self.coeff_bits)})"
        total, cap = sum(self.coeff_bits), MAX_COEFF_BITS_128[n]
        if total > cap:
            bigger = next((m for m, c in sorted(MAX_COEFF_BITS_128.items()) if c >= total), None)
            fix = f"use --he-poly-degree {bigger} or smaller" if bigger else "use smaller"
            return (f"he_poly_degree {n} allows at most {cap} coefficient-modulus bits at 128-bit "
                    f"security, but he_coeff_bits sums to {total}; {fix} --he-coeff-bits")
        if not 20 <= self.scale_bits <= self.data_bits - 12:
            return (f"he_scale_bits must be 20..{self.data_bits - 12} for a {self.data_bits}-bit "
                    f"data modulus (got {self.scale_bits}); use e.g. --he-scale-bits "
                    f"{max(20, min(40, self.data_bits - 20))}")
        if not 1 <= self.pack <= MAX_PACK:
            return f"he_pack must be 1..{MAX_PACK} values per slot (got {self.pack})"
        if self.pack > 1 and self.field_bits < MIN_FIELD_BITS:
            return (f"he_pack {self.pack} leaves {self.field_bits}-bit fields in a "
                    f"{self.payload_bits}-bit slot payload (need >= {MIN_FIELD_BITS}); use a "
                    "smaller --he-pack or a larger first --he-coeff-bits prime")
        return None


def parse_coeff_bits(text: str) -> tuple[int, ...]:
    """``"60,49"`` -> ``(60, 49)``; raises ValueError on anything else."""
    parts = [p.strip() for p in str(text).split(",")]
    if not parts or any(not p.lstrip("-").isdigit() for p in parts):
        raise ValueError(f"not a comma-separated list of integers: {text!r}")
    return tuple(int(p) for p in parts)


# ---------------------------------------------------------------------- fixed-point packing
def pack_fixed(values: np.ndarray, frac_bits: int, field_bits: int, pack: int) -> np.ndarray:
    """Round ``values`` to ``frac_bits`` fractional bits and pack ``pack`` of them per slot as
    balanced base-``2^field_bits`` digits. Returns one float64 (an exact integer) per slot."""
    v = np.asarray(values, dtype=np.float64).ravel()
    refuse_non_finite(v)
    q = np.rint(v * 2.0 ** frac_bits).astype(np.int64)
    limit = 1 << (field_bits - 1)
    if q.size and int(np.abs(q).max()) >= limit:
        raise OverflowError("value does not fit its packing field")
    pad = (-q.size) % pack
    q = np.concatenate([q, np.zeros(pad, dtype=np.int64)]).reshape(-1, pack)
    packed = np.zeros(q.shape[0], dtype=np.int64)
    for t in range(pack - 1, -1, -1):
        packed = (packed << field_bits) + q[:, t]
    return packed.astype(np.float64)


def unpack_fixed(slots: np.ndarray, count: int, frac_bits: int, field_bits: int,
                 pack: int) -> np.ndarray:
    """Inverse of :func:`pack_fixed` for a (possibly summed) slot vector: ``count`` values."""
    p = np.rint(np.asarray(slots, dtype=np.float64)).astype(np.int64)
    half, mask = 1 << (field_bits - 1), (1 << field_bits) - 1
    out = np.empty((p.size, pack), dtype=np.int64)
    for t in range(pack):
        digit = ((p + half) & mask) - half
        out[:, t] = digit
        p = (p - digit) >> field_bits
    return out.ravel()[:count].astype(np.float64) / 2.0 ** frac_bits


# ---------------------------------------------------------------------- contexts
def _ts():
    return require("tenseal", feature="CKKS encryption (--secure-sum he, --encrypt-models)")


class HEClientContext:
    """A client's CKKS context: holds the secret key (generated here or received sealed)."""

    def __init__(self, context, params: HEParams, key_id: bytes) -> None:
        self._ctx = context
        self.params = params
        self.key_id = key_id  # random tag naming this key (public; lets the server notice a new key)

    @classmethod
    def generate(cls, params: HEParams) -> HEClientContext:
        ts = _ts()
        ctx = ts.context(ts.SCHEME_TYPE.CKKS, params.poly_degree,
                         coeff_mod_bit_sizes=list(params.coeff_bits),
                         encryption_type=ts.ENCRYPTION_TYPE.SYMMETRIC, n_threads=1)
        ctx.global_scale = 2.0 ** params.scale_bits
        return cls(ctx, params, os.urandom(16))

    @classmethod
    def from_secret_bytes(cls, data: bytes, params: HEParams) -> HEClientContext:
        """Inverse of :meth:`secret_bytes` (what a client unseals)."""
        ctx = _ts().context_from(data[16:], n_threads=1)
        if not ctx.is_private():
            raise ValueError("received HE context holds no secret key")
        ctx.global_scale = 2.0 ** params.scale_bits
        return cls(ctx, params, data[:16])

    def secret_bytes(self) -> bytes:
        """Key id + parameters + secret key (no relinearisation or Galois keys: only additions
        are used). Only ever sent sealed to another client."""
        return self.key_id + self._ctx.serialize(save_public_key=False, save_secret_key=True,
                                                 save_galois_keys=False, save_relin_keys=False)

    def public_bytes(self) -> bytes:
        """What the server gets: the encryption parameters, without any key."""
        return self._ctx.serialize(save_public_key=False, save_secret_key=False,
                                   save_galois_keys=False, save_relin_keys=False)

    # ------------------------------------------------------------------ real values
    def encrypt_real(self, values: np.ndarray) -> list[Ciphertext]:
        flat = np.asarray(values, dtype=np.float64).ravel()
        refuse_non_finite(flat)
        if flat.size and float(np.abs(flat).max()) * self.params.clients >= self.params.real_limit:
            raise OverflowError(f"values up to {float(np.abs(flat).max()):.3g} are too large for "
                                f"CKKS scale 2^{self.params.scale_bits}; lower --he-scale-bits")
        return self._encrypt_slots(flat, 2.0 ** self.params.scale_bits)

    def decrypt_real(self, chunks: Sequence[Ciphertext], count: int) -> np.ndarray:
        return self._decrypt_slots(chunks)[:count]

    # ------------------------------------------------------------------ packed integers
    def encrypt_packed(self, values: np.ndarray, frac_bits: int) -> list[Ciphertext]:
        p = self.params
        return self._encrypt_slots(pack_fixed(values, frac_bits, p.field_bits, p.pack),
                                   2.0 ** p.pack_scale_bits)

    def decrypt_packed(self, chunks: Sequence[Ciphertext], count: int,
                       frac_bits: int) -> np.ndarray:
        p = self.params
        return unpack_fixed(self._decrypt_slots(chunks), count, frac_bits, p.field_bits, p.pack)

    # ------------------------------------------------------------------ slots
    def _encrypt_slots(self, flat: np.ndarray, scale: float) -> list[Ciphertext]:
        ts, s = _ts(), self.params.slots
        return [Ciphertext(ts.ckks_vector(self._ctx, flat[i:i + s].tolist(), scale).serialize())
                for i in progress.track(range(0, flat.size, s), "HE encryption")]

    def add(self, parts: Sequence[Sequence[Ciphertext]]) -> list[Ciphertext]:
        """Chunk-wise sum of checked contributions (:mod:`fedgl.privacy.he_signed`), here at
        the receiver, which then decrypts it."""
        ts = _ts()
        return add_ciphertexts(lambda c: ts.ckks_vector_from(self._ctx, c.data), parts)

    def _decrypt_slots(self, chunks: Sequence[Ciphertext]) -> np.ndarray:
        ts = _ts()
        parts = [np.asarray(ts.ckks_vector_from(self._ctx, c.data).decrypt(), dtype=np.float64)
                 for c in chunks]
        return np.concatenate(parts) if parts else np.zeros(0)


class HEServerContext:
    """The server's view: a public context (parameters only). It can add, not decrypt."""

    def __init__(self, public_bytes: bytes) -> None:
        self.context = _ts().context_from(public_bytes, n_threads=1)
        if self.context.is_private():
            raise ValueError("the server must not receive a secret key")

    def load(self, ct: Ciphertext):
        """A ciphertext linked to the public context (its decrypt() raises: no secret key)."""
        return _ts().ckks_vector_from(self.context, ct.data)

    def add(self, parts: Sequence[Sequence[Ciphertext]]) -> list[Ciphertext]:
        """Chunk-wise sum of several clients' equally long ciphertext lists."""
        return add_ciphertexts(self.load, parts)


def add_ciphertexts(load, parts: Sequence[Sequence[Ciphertext]]) -> list[Ciphertext]:
    """Chunk-wise sum of equally long ciphertext lists, added in list order (``load`` links a
    ciphertext to a context). The addition is exact modulo the ciphertext modulus, so any order
    gives the same ciphertext."""
    if not parts:
        return []
    n = len(parts[0])
    if any(len(p) != n for p in parts):
        raise ValueError("clients sent different numbers of ciphertexts for one block")
    out = []
    for i in range(n):
        acc = load(parts[0][i])
        for p in parts[1:]:
            acc.add_(load(p[i]))
        out.append(Ciphertext(acc.serialize()))
    return out
