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
def listener(tls: dict[str, Path] | None, host: str = "127.0.0.1") -> Iterator[str]:
    """A server on 127.0.0.1 that completes TLS handshakes (``tls``: the certificate files) or
    reads a little and closes; yields its address; stops its thread on exit."""
    server = socket.socket()
    server.bind((host, 0))
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
        yield f"{host}:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()


def _san(path: Path) -> tuple[list[str], list[str]]:
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(path.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return ([str(a) for a in san.get_values_for_type(x509.IPAddress)],
            san.get_values_for_type(x509.DNSName))


def test_certs_cover_every_host_given_and_loopback(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture) -> None:
    """Loopback is always covered: Flower's SuperExec inside the SuperLink connects to
    127.0.0.1, and dies at start-up against a certificate for the public address only."""
    out = tmp_path / "certs"
    assert main(["certs", "--host", "10.1.2.3", "--host", "superlink.example",
                 "--out", str(out)]) == 0
    assert _san(out / "superlink.pem") == (["10.1.2.3", "127.0.0.1"],
                                          ["superlink.example", "localhost"])
    assert (out / "superlink.key").stat().st_mode & 0o077 == 0
    assert (out / "ca.key").stat().st_mode & 0o077 == 0
    assert "ca.key" in capsys.readouterr().out
    assert main(["certs", "--host", "bad host!", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "neither an IP address nor a DNS name" in err[0], err
    assert not (tmp_path / "b").exists()


def test_certs_again_adds_a_host_under_the_same_ca(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture) -> None:
    """A second call keeps the CA (the organisations keep their ca.pem) and issues a server
    certificate covering the old hosts and the new, which verifies against the first ca.pem."""
    from cryptography import x509

    out = tmp_path / "certs"
    assert main(["certs", "--host", "10.1.2.3", "--out", str(out)]) == 0
    ca_before = (out / "ca.pem").read_bytes()
    ca_key_before = (out / "ca.key").read_bytes()
    cert_before = (out / "superlink.pem").read_bytes()
    capsys.readouterr()
    assert main(["certs", "--host", "10.4.5.6", "--out", str(out)]) == 0
    assert "organisations keep their ca.pem" in capsys.readouterr().out
    assert (out / "ca.pem").read_bytes() == ca_before
    assert (out / "ca.key").read_bytes() == ca_key_before
    assert (out / "superlink.pem").read_bytes() != cert_before
    ips, names = _san(out / "superlink.pem")
    assert set(ips) == {"10.4.5.6", "10.1.2.3", "127.0.0.1"} and names == ["localhost"]
    ca = x509.load_pem_x509_certificate(ca_before)
    cert = x509.load_pem_x509_certificate((out / "superlink.pem").read_bytes())
    cert.verify_directly_issued_by(ca)
    assert (out / "superlink.key").stat().st_mode & 0o077 == 0


def test_certs_refuse_a_folder_whose_ca_cannot_be_reused(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    """A CA without its key, a CA key others can read, or a server certificate without its CA:
    one line each, nothing overwritten."""
    cases = []
    a = tmp_path / "a"
    trial_certificates(a, ("10.1.2.3",))
    (a / "ca.key").unlink()
    cases.append((a, "without its key"))
    b = tmp_path / "b"
    trial_certificates(b, ("10.1.2.3",))
    (b / "ca.key").chmod(0o644)
    cases.append((b, "chmod 600"))
    c = tmp_path / "c"
    trial_certificates(c, ("10.1.2.3",))
    (c / "ca.pem").unlink()
    (c / "ca.key").unlink()
    cases.append((c, "without the CA that signed it"))
    for folder, needle in cases:
        before = (folder / "superlink.pem").read_bytes()
        assert main(["certs", "--host", "10.7.7.7", "--out", str(folder)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], err
        assert (folder / "superlink.pem").read_bytes() == before


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
    # loopback is always covered; another loopback address stands in for the server's
    with listener(certs, "127.0.0.2") as address, pytest.raises(ConfigError) as caught:
        check_transport(address, str(certs["ca"]))
    assert "IP address mismatch" in str(caught.value)
    assert "fedgl certs --host 127.0.0.2" in str(caught.value)


def test_tls_against_a_plain_superlink_is_refused(tmp_path: Path) -> None:
    certs = trial_certificates(tmp_path, ("127.0.0.1",))
    with listener(None) as address, pytest.raises(ConfigError, match="did not complete a TLS "
                                                                      "handshake"):
        check_transport(address, str(certs["ca"]), timeout=3.0)
    with listener(None) as address:
        check_transport(address, None)
