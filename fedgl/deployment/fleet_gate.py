"""``fedgl gate``: the organisations' only way in to the SuperLink, its Fleet API and nothing else.

Flower 1.42's SuperLink serves its three APIs on one HTTP port (``--host``/``--port``): the
Fleet API (``/v1/fleet/...``: SuperNodes register, pull messages, push replies), the Control API
(``/v1/control/...``: ``flwr run``, ``flwr ls``, ``flwr log``, ``flwr stop``, SuperNode
registration) and the Runtime API (``/v1/runtime/...``: the ServerApps and SuperExec). Anyone
who reaches that port with the public CA can submit an app (``flwr run``, no account) that the
SuperLink then runs on the coordinator's machine, list and stop runs, and read their logs; the
``--control-api-address`` flag that once put the Control API on its own address is deprecated
and ignored.

So the documented SuperLink listens on 127.0.0.1 only (where ``fedgl server`` and ``flwr`` run,
on the coordinator's machine), and the gate listens on the address the organisations reach: it
terminates TLS with the SuperLink's certificate, forwards each request whose method is ``POST``
and whose path starts with ``/v1/fleet/`` to the SuperLink (over TLS, checked against the CA),
and answers any other request with ``403`` and a one-line reason, then closes the connection;
each refusal is one line on its terminal. It reads each request's head (at most
:data:`MAX_HEAD` bytes) before anything is forwarded; bodies and answers stream through.
"""

from __future__ import annotations

import socket
import ssl
import sys
import threading
from pathlib import Path
from typing import Any

from fedgl.errors import ConfigError

#: the only requests the gate forwards: the SuperNodes' Fleet API
FLEET_PREFIX = b"/v1/fleet/"
#: the largest request head (request line and headers) the gate reads
MAX_HEAD = 64 * 1024
_CHUNK = 1 << 16


def allowed(method: bytes, target: bytes) -> bool:
    """Whether a request goes through: ``POST`` to a Fleet API path (no ``..`` in it)."""
    path = target.split(b"?", 1)[0]
    return method == b"POST" and path.startswith(FLEET_PREFIX) and b".." not in path


def refusal_line(peer: str, method: bytes, target: bytes) -> str:
    """The gate's one line for a refused request."""
    shown = target[:120].decode("ascii", "replace")
    return (f"fedgl gate: refused {method.decode('ascii', 'replace')} {shown} from {peer}: only "
            "the Fleet API is served here (flwr and fedgl server run on the SuperLink's own "
            "machine)")


class Gate:
    """The gate's server (see the module docstring). ``server_ctx``: TLS towards the
    organisations (None: plain, for a trial with ``--insecure``); ``upstream_ctx``: TLS towards
    the SuperLink (None: plain)."""

    def __init__(self, listen: tuple[str, int], superlink: tuple[str, int],
                 server_ctx: ssl.SSLContext | None, upstream_ctx: ssl.SSLContext | None) -> None:
        self.superlink, self.server_ctx, self.upstream_ctx = superlink, server_ctx, upstream_ctx
        self.sock = socket.create_server(listen, reuse_port=False)
        self.address = self.sock.getsockname()[:2]
        self.stop = threading.Event()
        self.refused = 0

    def serve_forever(self) -> None:
        """Accept connections until :meth:`close`; each is served in its own thread."""
        self.sock.settimeout(0.5)
        while not self.stop.is_set():
            try:
                conn, peer = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                if self.stop.is_set():
                    return
                raise
            threading.Thread(target=self._serve, args=(conn, f"{peer[0]}:{peer[1]}"),
                             daemon=True).start()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()

    # ------------------------------------------------------------------ one connection
    def _serve(self, conn: socket.socket, peer: str) -> None:
        import h11

        upstream: _Upstream | None = None
        try:
            conn.settimeout(300)
            if self.server_ctx is not None:
                conn = self.server_ctx.wrap_socket(conn, server_side=True)
            down = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
            upstream = _Upstream(self.superlink, self.upstream_ctx)
            while True:
                request = _next(down, conn)
                if not isinstance(request, h11.Request):
                    return   # closed, or not HTTP
                if not allowed(request.method, request.target):
                    self.refused += 1
                    print(refusal_line(peer, request.method, request.target), file=sys.stderr,
                          flush=True)
                    _send(down, conn, h11.Response(status_code=403, headers=[
                        ("content-type", "text/plain"), ("connection", "close"),
                        ("content-length", str(len(REFUSED)))]))
                    _send(down, conn, h11.Data(data=REFUSED))
                    _send(down, conn, h11.EndOfMessage())
                    return
                body = bytearray()
                while not isinstance(event := _next(down, conn), h11.EndOfMessage):
                    if not isinstance(event, h11.Data):
                        return
                    body += event.data
                up, response = upstream.ask(request, bytes(body))
                _send(down, conn, h11.Response(status_code=response.status_code,
                                               headers=_headers(response.headers),
                                               reason=response.reason))
                while not isinstance(event := _next(up.conn, up.sock), h11.EndOfMessage):
                    if not isinstance(event, h11.Data):
                        return
                    _send(down, conn, event)
                _send(down, conn, h11.EndOfMessage())
                if down.their_state is not h11.DONE or not upstream.done():
                    return
                down.start_next_cycle()
        except (OSError, ssl.SSLError, h11.ProtocolError, _UpstreamGone):
            return
        finally:
            if upstream is not None:
                upstream.close()
            try:
                conn.close()
            except OSError:
                pass


#: the body of the gate's refusal
REFUSED = b"fedgl gate: only the Fleet API is served to the organisations\n"


class _UpstreamGone(Exception):
    """The SuperLink closed the connection or could not be reached."""


class _Link:
    """One HTTP/1.1 connection to the SuperLink."""

    def __init__(self, sock: socket.socket, conn: Any) -> None:
        self.sock, self.conn, self.used = sock, conn, False


class _Upstream:
    """The gate's keep-alive connection to the SuperLink for one organisation's connection: a
    request on a connection the SuperLink closed meanwhile (its keep-alive timeout) is sent
    again once on a new one, as HTTP clients do."""

    def __init__(self, address: tuple[str, int], ctx: ssl.SSLContext | None) -> None:
        self.address, self.ctx = address, ctx
        self.link: _Link | None = None

    def _open(self) -> _Link:
        import h11

        try:
            sock = socket.create_connection(self.address, timeout=300)
            if self.ctx is not None:
                sock = self.ctx.wrap_socket(sock, server_hostname=self.address[0])
        except OSError as exc:
            raise _UpstreamGone(str(exc)) from None
        return _Link(sock, h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD))

    def ask(self, request: Any, body: bytes) -> tuple[_Link, Any]:
        """Send ``request`` with ``body``; the link and the response's head."""
        import h11

        for attempt in (0, 1):
            if self.link is None:
                self.link = self._open()
            link = self.link
            reused = link.used
            try:
                _send(link.conn, link.sock, h11.Request(method=request.method,
                                                        target=request.target,
                                                        headers=_headers(request.headers)))
                if body:
                    _send(link.conn, link.sock, h11.Data(data=body))
                _send(link.conn, link.sock, h11.EndOfMessage())
                response = _next(link.conn, link.sock)
                while isinstance(response, h11.InformationalResponse):
                    response = _next(link.conn, link.sock)
            except (OSError, ssl.SSLError, h11.ProtocolError):
                response = None
            if isinstance(response, h11.Response):
                link.used = True
                return link, response
            self.close()
            if not reused or attempt:
                raise _UpstreamGone("the SuperLink closed the connection")
        raise _UpstreamGone("unreachable")

    def done(self) -> bool:
        """After a whole response: whether the link can carry the next request (else it is
        closed, and the next request opens a new one)."""
        import h11

        link = self.link
        if link is None:
            return True
        if link.conn.our_state is h11.DONE and link.conn.their_state is h11.DONE:
            link.conn.start_next_cycle()
        else:
            self.close()
        return True

    def close(self) -> None:
        if self.link is not None:
            try:
                self.link.sock.close()
            except OSError:
                pass
            self.link = None


def _headers(headers: Any) -> list[tuple[bytes, bytes]]:
    """A message's headers to pass on (hop-by-hop ones dropped but its framing)."""
    hop = {b"connection", b"keep-alive", b"proxy-connection", b"upgrade", b"te"}
    return [(k, v) for k, v in headers if k.lower() not in hop]


def _next(conn: Any, sock: socket.socket) -> Any:
    """The next h11 event from ``sock`` (reading as needed); ConnectionClosed at its end."""
    import h11

    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        conn.receive_data(sock.recv(_CHUNK))


def _send(conn: Any, sock: socket.socket, event: Any) -> None:
    data = conn.send(event)
    if data:
        sock.sendall(data)


# ---------------------------------------------------------------------- the command
def _address(text: str, flag: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{flag} '{text}' must look like HOST:PORT, e.g. 0.0.0.0:9092")
    return host.strip("[]"), int(port)


def contexts(args: Any) -> tuple[ssl.SSLContext | None, ssl.SSLContext | None]:
    """The gate's TLS towards the organisations and towards the SuperLink, from its flags."""
    if args.insecure:
        if args.root_certificates or args.ssl_certfile or args.ssl_keyfile:
            raise ConfigError("--insecure serves and forwards without TLS; drop the certificate "
                              "flags, or drop --insecure")
        return None, None
    missing = [f for f, v in (("--root-certificates", args.root_certificates),
                              ("--ssl-certfile", args.ssl_certfile),
                              ("--ssl-keyfile", args.ssl_keyfile)) if not v]
    if missing:
        raise ConfigError(f"fedgl gate needs {', '.join(missing)} (the SuperLink's CA, "
                          "certificate and key, as `fedgl certs` wrote them), or --insecure for "
                          "a trial without TLS")
    for path in (args.root_certificates, args.ssl_certfile, args.ssl_keyfile):
        if not Path(path).is_file():
            raise ConfigError(f"'{path}' does not exist")
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        server.load_cert_chain(args.ssl_certfile, args.ssl_keyfile)
        upstream = ssl.create_default_context(cafile=args.root_certificates)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"the gate's certificate, key or CA cannot be used ({exc})") from None
    return server, upstream


def add_gate_parser(sub: Any) -> None:
    """``fedgl gate``'s parser."""
    gate = sub.add_parser(
        "gate", help="serve the SuperLink's Fleet API, and nothing else, to the organisations",
        description="Listen on --listen (the address the organisations reach) and forward the "
                    "SuperNodes' Fleet API requests to the SuperLink on --superlink (127.0.0.1 "
                    "on this machine); any other request (flwr run, ls, log, stop: the Control "
                    "API; the Runtime API) is refused with 403 in one line. TLS towards both "
                    "with the SuperLink's own certificate, key and CA.")
    gate.add_argument("--listen", required=True, metavar="HOST:PORT",
                      help="where the organisations' SuperNodes connect, e.g. 0.0.0.0:9092")
    gate.add_argument("--superlink", required=True, metavar="HOST:PORT",
                      help="the SuperLink, listening on this machine only, e.g. 127.0.0.1:9093")
    gate.add_argument("--root-certificates", default=None, metavar="CA.pem",
                      help="the CA that signed the SuperLink's certificate")
    gate.add_argument("--ssl-certfile", default=None, metavar="CERT.pem",
                      help="the certificate the organisations see (the SuperLink's)")
    gate.add_argument("--ssl-keyfile", default=None, metavar="KEY",
                      help="its private key")
    gate.add_argument("--insecure", action="store_true",
                      help="no TLS either way (a trial on one machine only)")


def cmd_gate(args: Any) -> int:
    """Run the gate until Ctrl-C or SIGTERM."""
    import signal

    listen = _address(args.listen, "--listen")
    superlink = _address(args.superlink, "--superlink")
    server_ctx, upstream_ctx = contexts(args)
    try:
        gate = Gate(listen, superlink, server_ctx, upstream_ctx)
    except OSError as exc:
        raise ConfigError(f"--listen {args.listen}: cannot listen there ({exc.strerror or exc})"
                          ) from None
    host, port = gate.address
    print(f"fedgl gate: the organisations connect to {host}:{port} (Fleet API only), "
          f"forwarded to the SuperLink at {args.superlink}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: gate.close())
    try:
        gate.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        gate.close()
    print(f"fedgl gate: stopped ({gate.refused} requests refused)", flush=True)
    return 0
