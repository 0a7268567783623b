"""Framing between a Flower ClientApp relay and its organisation's party, over a local socket.

One request and one reply per connection; each is ``u32 header length | UTF-8 JSON header |
u64 body length | body``. The body is a fedgl message (:meth:`Encoded.to_bytes`) or empty; the
header carries the operation and small fields. Plain sockets and JSON: no pickle, nothing that
builds objects.

The receiver decides, from the header and the declared body length alone, whether to read the
body: :func:`recv_frame` takes a ``limit`` (a byte count, or a function of the header that
returns one or raises :class:`FrameRefused`), so a frame whose body is beyond what its message
may carry is refused before a byte of it is read or allocated. A sender whose frame is refused
reads the one-line refusal the receiver wrote before it closed (:func:`ask`).
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Callable
from typing import Any

MAX_HEADER = 1 << 20
#: the party's own message types (declared by :class:`fedgl.deployment.party.Party`) and the
#: phase that carries them; the relay registers them before any run is set up
HELLO, SETUP, SETUP_PHASE = "party.hello", "party.setup", "setup"
#: the largest body a frame may declare whatever its receiver (the party's replies: trusted)
MAX_BODY = 1 << 34
#: header field with the relay's credential (:mod:`fedgl.federation.flower.relay_runner`)
TOKEN_KEY = "relay_token"


class LinkError(ConnectionError):
    """The party is unreachable or broke the framing."""


class FrameRefused(LinkError):
    """The receiver refuses a frame from its header alone (the one-line reason)."""


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


def recv_header(sock: socket.socket) -> tuple[dict[str, Any], int]:
    """A frame's header and its declared body length (the body is still unread)."""
    (hlen,) = struct.unpack("<I", _recv_exact(sock, 4))
    if hlen > MAX_HEADER:
        raise FrameRefused(f"the frame header is {hlen} bytes, over {MAX_HEADER}")
    try:
        header = json.loads(_recv_exact(sock, hlen))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise FrameRefused("unreadable frame header") from None
    if not isinstance(header, dict):
        raise FrameRefused("frame header is not a record")
    (blen,) = struct.unpack("<Q", _recv_exact(sock, 8))
    return header, blen


def recv_frame(sock: socket.socket,
               limit: int | Callable[[dict[str, Any], int], int] = MAX_BODY
               ) -> tuple[dict[str, Any], bytes]:
    """One frame; its body is read only when its declared length is within ``limit`` (bytes,
    or ``limit(header, length)``, which may raise :class:`FrameRefused` itself)."""
    header, blen = recv_header(sock)
    most = limit(header, blen) if callable(limit) else limit
    if blen > most:
        raise FrameRefused(f"the frame body is {blen} bytes, over the limit of {most}")
    return header, _recv_exact(sock, blen) if blen else b""


def ask(path: str, header: dict[str, Any], body: bytes = b"",
        timeout: float | None = None) -> tuple[dict[str, Any], bytes]:
    """Send one request to the party listening at the Unix socket ``path``; its reply (a
    refusal the party wrote before it stopped reading the request included)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        try:
            sock.connect(path)
        except OSError as exc:
            raise LinkError(f"no fedgl party listens at '{path}' ({exc.strerror or exc}); start "
                            "it with `fedgl client`") from None
        try:
            send_frame(sock, header, body)
        except (BrokenPipeError, ConnectionResetError):
            pass   # the party refused the frame from its header: its reply is waiting
        try:
            return recv_frame(sock)
        except OSError as exc:
            if isinstance(exc, LinkError):
                raise
            raise LinkError(f"the party at '{path}' closed the connection ({exc})") from None
    finally:
        sock.close()
