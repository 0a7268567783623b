"""Long-term identities of the parties and the federation roster.

Every client holds an Ed25519 identity key; the **roster** maps client ids to the public halves.
The roster is provisioned outside the server and every client trusts it: in simulation the
driver makes it as the experimenter (:func:`make_roster`) and hands each client its own private
key with the roster, as it hands each client its data; for a real deployment ``write_keys``
writes one private key file per client and a public roster file, to be copied to each client
machine over a channel the server does not control. The server never holds a private identity
key, so it cannot sign an ephemeral key in a client's name: a key it substitutes or a phantom
client it adds is detected by every honest client (:class:`AttackDetected`).

Also here: Shamir secret sharing over the prime field ``GF(2^521 - 1)`` (Shamir, 1979), used by
the dropout-robust secure sum to share 32-byte secrets with threshold ``t``:
``f(x) = s + a_1 x + ... + a_{t-1} x^{t-1}``, share of party k is ``f(k + 1)``, and
``s = Σ_i y_i Π_{j≠i} x_j / (x_j - x_i)`` from any t shares (Lagrange at 0).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path

from fedgl.errors import ConfigError, RunAborted

PRIME = 2 ** 521 - 1  # a Mersenne prime far above any 32-byte secret
SHARE_BYTES = 66


class AttackDetected(RunAborted):
    """A client saw a message no honest server sends (a substituted or phantom key, an
    inconsistent directory, a replayed session, a faked dropout): the run stops."""


def frame(*parts: bytes | str | int) -> bytes:
    """Unambiguous concatenation (each part length-prefixed) for signing and hashing."""
    out = bytearray()
    for p in parts:
        b = part_bytes(p)
        out += len(b).to_bytes(4, "little") + b
    return bytes(out)


def part_bytes(part: bytes | str | int) -> bytes:
    """One part of :func:`frame` as it is framed: text as UTF-8, an integer as 8 bytes."""
    return part.encode() if isinstance(part, str) else (
        part.to_bytes(8, "little", signed=True) if isinstance(part, int) else bytes(part))


class Identity:
    """A client's long-term Ed25519 key (private; never leaves the client)."""

    def __init__(self, private_bytes: bytes | None = None) -> None:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        self._key = (Ed25519PrivateKey.from_private_bytes(private_bytes) if private_bytes
                     else Ed25519PrivateKey.generate())
        self.public = self._key.public_key().public_bytes_raw()

    def sign(self, message: bytes) -> bytes:
        return self._key.sign(message)

    def private_bytes(self) -> bytes:
        """For provisioning files only (``write_keys``)."""
        return self._key.private_bytes_raw()


class Roster:
    """Client id -> Ed25519 public key; immutable, trusted by every client."""

    def __init__(self, keys: Mapping[int, bytes]) -> None:
        self._keys = {int(k): bytes(v) for k, v in keys.items()}
        if any(len(v) != 32 for v in self._keys.values()):
            raise ConfigError("a roster key is not a 32-byte Ed25519 public key; re-create the "
                              "roster with `fedgl keys`")

    @property
    def ids(self) -> list[int]:
        return sorted(self._keys)

    def __contains__(self, client_id: object) -> bool:
        return client_id in self._keys

    def verify(self, client_id: int, message: bytes, signature: bytes) -> bool:
        """True iff ``signature`` is ``client_id``'s signature of ``message``."""
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        if client_id not in self._keys:
            return False
        try:
            Ed25519PublicKey.from_public_bytes(self._keys[client_id]).verify(bytes(signature),
                                                                              message)
        except (InvalidSignature, ValueError, TypeError):
            return False
        return True

    def digest(self) -> bytes:
        return hashlib.sha256(frame(*[frame(k, v) for k, v in sorted(self._keys.items())])).digest()

    def to_dict(self) -> dict[str, str]:
        return {str(k): v.hex() for k, v in sorted(self._keys.items())}

    @classmethod
    def from_dict(cls, data: Mapping[str, str]) -> Roster:
        try:
            return cls({int(k): bytes.fromhex(v) for k, v in data.items()})
        except (ValueError, TypeError):
            raise ConfigError("the roster file is not {client id: hex key}; re-create it with "
                              "`fedgl keys`") from None


def make_roster(client_ids: Iterable[int]) -> tuple[Roster, dict[int, Identity]]:
    """The experimenter's provisioning in simulation: one fresh identity per client."""
    ids = {int(k): Identity() for k in client_ids}
    return Roster({k: v.public for k, v in ids.items()}), ids


def write_keys(folder: str | Path, clients: int) -> Path:
    """A real deployment's provisioning: ``roster.json`` (public) and ``client-<k>.key`` (private
    key, hex, mode 0600; copy each to its client only). Returns the roster path."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    roster, ids = make_roster(range(clients))
    for k, ident in ids.items():
        path = out / f"client-{k}.key"
        path.write_text(ident.private_bytes().hex() + "\n")
        path.chmod(0o600)
    path = out / "roster.json"
    path.write_text(json.dumps(roster.to_dict(), indent=2) + "\n")
    return path


# ---------------------------------------------------------------------- Shamir sharing
def shamir_split(secret: bytes, holders: Iterable[int], threshold: int) -> dict[int, bytes]:
    """Shares of a secret (at most 64 bytes) for each holder id; any ``threshold`` recover it."""
    value = int.from_bytes(secret, "big")
    if value >= PRIME or threshold < 1:
        raise ValueError("secret too large or threshold < 1")
    coeffs = [value] + [secrets.randbelow(PRIME) for _ in range(threshold - 1)]
    out = {}
    for k in holders:
        x, acc = k + 1, 0
        for c in reversed(coeffs):
            acc = (acc * x + c) % PRIME
        out[k] = acc.to_bytes(SHARE_BYTES, "big")
    return out


def shamir_combine(shares: Mapping[int, bytes], length: int = 32) -> bytes:
    """The secret from shares {holder id: share} (Lagrange interpolation at 0)."""
    xs = {k: k + 1 for k in shares}
    ys = {k: int.from_bytes(v, "big") for k, v in shares.items()}
    secret = 0
    for i in shares:
        num, den = 1, 1
        for j in shares:
            if j != i:
                num = num * xs[j] % PRIME
                den = den * (xs[j] - xs[i]) % PRIME
        secret = (secret + ys[i] * num * pow(den, -1, PRIME)) % PRIME
    if secret >= 1 << (8 * length):
        raise ValueError("the shares do not reconstruct a secret (too few or inconsistent)")
    return secret.to_bytes(length, "big")
