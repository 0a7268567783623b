"""Each organisation makes its own identity key; together they assemble and check the roster.

``fedgl keys --clients K`` makes every key in one folder (tests, demos). In a real federation no
one should hold every private key: organisation ``k``

1. makes its key where it lives (:func:`write_own_key`): ``client-k.key`` (private, hex, mode
   0600, never leaves it) and ``client-k.pub.json`` = ``{"format": "fedgl-pubkey/1",
   "client_id": k, "public_key": hex}``, the public half it hands to the other organisations;
2. the organisations assemble ``roster.json`` from every public half (:func:`assemble_roster`;
   any of them can, the server never does: it only receives the finished roster);
3. each organisation checks the roster it is given (:func:`check_roster`): exactly the public
   halves it collected, its own among them, and tells the others the roster's digest (SHA-256 of
   its canonical form, :meth:`~fedgl.privacy.identity.Roster.digest`) over a channel the server
   does not control; every party's hello to the server is signed over that digest, so a roster
   changed on the way is detected at the first run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from fedgl.errors import ConfigError
from fedgl.privacy.identity import Identity, Roster

PUBKEY_FORMAT = "fedgl-pubkey/1"


def write_own_key(folder: Path, client_id: int) -> tuple[Path, Path]:
    """Organisation ``client_id``'s key pair in ``folder``: ``(private file, public half)``;
    never overwrites a key."""
    if client_id < 0:
        raise ConfigError(f"--client-id must be >= 0 (got {client_id})")
    folder.mkdir(parents=True, exist_ok=True)
    private, public = folder / f"client-{client_id}.key", folder / f"client-{client_id}.pub.json"
    if private.exists() or public.exists():
        raise ConfigError(f"'{private}' exists; keys are never overwritten, choose an empty "
                          "--out folder")
    ident = Identity()
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(ident.private_bytes().hex() + "\n")
    public.write_text(json.dumps({"format": PUBKEY_FORMAT, "client_id": client_id,
                                  "public_key": ident.public.hex()}, indent=2) + "\n")
    return private, public


def read_public(path: Path) -> tuple[int, str]:
    """``(client id, hex public key)`` of a ``client-k.pub.json``."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"public key '{path}' does not exist; make it with `fedgl key`") \
            from None
    except (OSError, ValueError):
        raise ConfigError(f"public key '{path}' is unreadable; make it with `fedgl key`") \
            from None
    if not (isinstance(data, dict) and data.get("format") == PUBKEY_FORMAT
            and isinstance(data.get("client_id"), int) and isinstance(data.get("public_key"), str)):
        raise ConfigError(f"'{path}' is not a {PUBKEY_FORMAT} file from `fedgl key`")
    try:
        if len(bytes.fromhex(data["public_key"])) != 32:
            raise ValueError
    except ValueError:
        raise ConfigError(f"'{path}': the public key is not 32 hex bytes") from None
    return int(data["client_id"]), data["public_key"]


def _collect(publics: list[Path]) -> dict[str, str]:
    keys: dict[str, str] = {}
    for p in publics:
        k, key = read_public(p)
        if str(k) in keys:
            raise ConfigError(f"two public keys claim client {k} ({p}); each organisation "
                              "hands over one")
        if key in keys.values():
            raise ConfigError(f"'{p}' repeats another client's public key; each organisation "
                              "makes its own")
        keys[str(k)] = key
    ids = sorted(int(k) for k in keys)
    if ids != list(range(len(ids))):
        raise ConfigError(f"the public keys are for clients {ids}; a federation of "
                          f"{len(ids)} needs clients 0..{len(ids) - 1}")
    return {str(k): keys[str(k)] for k in ids}


def assemble_roster(publics: list[Path], out: Path) -> Path:
    """``roster.json`` ({client id: hex public key}) from every organisation's public half."""
    if out.exists():
        raise ConfigError(f"'{out}' exists; rosters are never overwritten")
    keys = _collect(publics)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(keys, indent=2) + "\n")
    return out


def check_roster(roster: Path, publics: list[Path]) -> str:
    """The roster's digest (hex) if it holds exactly these public keys, else a ConfigError
    naming the first difference."""
    try:
        data = json.loads(roster.read_text())
        held = Roster.from_dict(data).to_dict() if isinstance(data, dict) else None
    except (OSError, ValueError):
        held = None
    if held is None:
        raise ConfigError(f"roster '{roster}' is missing or not {{client id: hex key}}")
    want = _collect(publics)
    for k in sorted(set(held) | set(want), key=int):
        if held.get(k) != want.get(k):
            what = ("is missing" if k not in held else "is not one handed over" if k not in want
                    else "has another key than the one handed over")
            raise ConfigError(f"roster '{roster}': client {k} {what}; do not use this roster")
    return Roster.from_dict(held).digest().hex()
