"""``fedgl certs`` and the transport check of ``fedgl client``/``server``: a SuperLink reached
by IP address gets a certificate that covers it, and a command whose TLS setting does not match
the SuperLink's is refused in one line within seconds (Flower would retry for ever).

The SuperLinks here are stand-ins on 127.0.0.1: a TLS server with the trial certificates, and a
plain TCP server that closes what it cannot read (as a SuperLink without TLS does with a TLS
hello)."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from fedgl.cli import main
from fedgl.deployment.tls import check_transport, trial_certificates
from fedgl.errors import ConfigError


@contextmanager
def listener(tls: dict[str, Path] | None) -> Iterator[str]:
    """A server on 127.0.0.1 that completes TLS handshakes (``tls``: the certificate files) or
    reads a little and closes; yields its address; stops its thread on exit."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    stop = threading.Event()
    context = None
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tls["cert"], tls["key"])
        context.set_alpn_protocols(["h2"])

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            conn.settimeout(2)
            try:
                if context is not None:
                    context.wrap_socket(conn, server_side=True).close()
                else:
                    conn.recv(64)
            except (OSError, ssl.SSLError):
                pass
            finally:
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()


def test_certs_cover_every_host_given(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from cryptography import x509

    out = tmp_path / "certs"
    assert main(["certs", "--host", "10.1.2.3", "--host", "superlink.example",
                 "--out", str(out)]) == 0
    cert = x509.load_pem_x509_certificate((out / "superlink.pem").read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(a) for a in san.get_values_for_type(x509.IPAddress)] == ["10.1.2.3"]
    assert san.get_values_for_type(x509.DNSName) == ["superlink.example"]
    assert (out / "superlink.key").stat().st_mode & 0o077 == 0
    capsys.readouterr()
    for argv, needle in ((["certs", "--host", "10.1.2.3", "--out", str(out)], "exists"),
                         (["certs", "--host", "bad host!", "--out", str(tmp_path / "b")],
                          "neither an IP address nor a DNS name")):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "b").exists()


def test_transport_check_accepts_a_matching_tls_superlink(tmp_path: Path) -> None:
    certs = trial_certificates(tmp_path, ("127.0.0.1",))
    with listener(certs) as address:
        check_transport(address, str(certs["ca"]))


def test_insecure_against_a_tls_superlink_is_refused(tmp_path: Path) -> None:
    certs = trial_certificates(tmp_path, ("127.0.0.1",))
    with listener(certs) as address, pytest.raises(ConfigError, match="speaks TLS but "
                                                                      "--insecure"):
        check_transport(address, None)


def test_a_certificate_for_another_address_names_the_fix(tmp_path: Path) -> None:
    """The "IP address mismatch" a documented recipe met: refused before Flower starts, naming
    ``fedgl certs --host``."""
    certs = trial_certificates(tmp_path, ("10.9.9.9", "superlink.example"))
    with listener(certs) as address, pytest.raises(ConfigError) as caught:
        check_transport(address, str(certs["ca"]))
    assert "IP address mismatch" in str(caught.value)
    assert "fedgl certs --host 127.0.0.1" in str(caught.value)


def test_tls_against_a_plain_superlink_is_refused(tmp_path: Path) -> None:
    certs = trial_certificates(tmp_path, ("127.0.0.1",))
    with listener(None) as address, pytest.raises(ConfigError, match="did not complete a TLS "
                                                                      "handshake"):
        check_transport(address, str(certs["ca"]), timeout=3.0)
    with listener(None) as address:
        check_transport(address, None)
