"""Framing between a Flower ClientApp relay and its organisation's party, over a local socket.

One request and one reply per connection; each is ``u32 header length | UTF-8 JSON header |
u64 body length | body``. The body is a fedgl message (:meth:`Encoded.to_bytes`) or empty; the
header carries the operation and small fields. Plain sockets and JSON: no pickle, nothing that
builds objects.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

MAX_HEADER = 1 << 20
#: the party's own message types (declared by :class:`fedgl.deployment.party.Party`) and the
#: phase that carries them; the relay registers them before any run is set up
HELLO, SETUP, SETUP_PHASE = "party.hello", "party.setup", "setup"
MAX_BODY = 1 << 34


class LinkError(ConnectionError):
    """The party is unreachable or broke the framing."""


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise LinkError("connection closed mid-frame")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def send_frame(sock: socket.socket, header: dict[str, Any], body: bytes = b"") -> None:
    head = json.dumps(header, separators=(",", ":")).encode()
    sock.sendall(struct.pack("<I", len(head)) + head + struct.pack("<Q", len(body)))
    if body:
        sock.sendall(body)


def recv_frame(sock: socket.socket) -> tuple[dict[str, Any], bytes]:
    (hlen,) = struct.unpack("<I", _recv_exact(sock, 4))
    if hlen > MAX_HEADER:
        raise LinkError("frame header too large")
    try:
        header = json.loads(_recv_exact(sock, hlen))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise LinkError("unreadable frame header") from None
    if not isinstance(header, dict):
        raise LinkError("frame header is not a record")
    (blen,) = struct.unpack("<Q", _recv_exact(sock, 8))
    if blen > MAX_BODY:
        raise LinkError("frame body too large")
    return header, _recv_exact(sock, blen) if blen else b""


def ask(path: str, header: dict[str, Any], body: bytes = b"",
        timeout: float | None = None) -> tuple[dict[str, Any], bytes]:
    """Send one request to the party listening at the Unix socket ``path``; its reply."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        try:
            sock.connect(path)
        except OSError as exc:
            raise LinkError(f"no fedgl party listens at '{path}' ({exc.strerror or exc}); start "
                            "it with `fedgl client`") from None
        send_frame(sock, header, body)
        return recv_frame(sock)
    finally:
        sock.close()
