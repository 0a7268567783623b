"""TLS for a deployment: self-signed trial certificates (``fedgl certs``; docs/deployment.md
gives the equivalent openssl commands), a CA and a SuperLink certificate it signed, for the given
host names and IP addresses, and the check that a SuperLink speaks the transport a command was
given (TLS verified for its address, or none). Production deployments use certificates from the
organisations' own PKI.

The CA key is kept (``ca.key``, mode 0600) beside ``ca.pem``: a later call with the same folder
reuses that CA and issues a new SuperLink certificate covering the hosts already covered plus the
new ones, so the organisations keep the ``ca.pem`` they were given. Loopback (127.0.0.1 and
localhost) is always covered: Flower's SuperExec inside the SuperLink connects there."""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path
from typing import Any

LOOPBACK: tuple[str, ...] = ("127.0.0.1", "localhost")
CA_DAYS = 365


def _general_name(host: str) -> Any:
    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def covered_hosts(cert_path: Path) -> list[str]:
    """The DNS names and IP addresses an existing SuperLink certificate covers (none if absent or
    unreadable)."""
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, x509.ExtensionNotFound):
        return []
    return ([str(a) for a in san.get_values_for_type(x509.IPAddress)]
            + list(san.get_values_for_type(x509.DNSName)))


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to a file only its owner can read (created 0600, never wider)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _load_ca(folder: Path) -> tuple[Any, Any] | None:
    """The CA certificate and key kept in ``folder`` (None when there is none); a CA whose key is
    missing, readable by others, not its certificate's or expired is refused in one line."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    from fedgl.errors import ConfigError

    ca_pem, ca_key = folder / "ca.pem", folder / "ca.key"
    if not ca_pem.exists() and not ca_key.exists():
        return None
    if not ca_key.exists():
        raise ConfigError(f"'{ca_pem}' exists without its key '{ca_key}' (made elsewhere, or by "
                          "an older fedgl); choose an empty --out folder for a new CA")
    if not ca_pem.exists():
        raise ConfigError(f"'{ca_key}' exists without its certificate '{ca_pem}'; restore "
                          "ca.pem (the copy the organisations hold) or choose an empty --out")
    if ca_key.stat().st_mode & 0o077:
        raise ConfigError(f"the CA key '{ca_key}' is readable by other users; run "
                          f"`chmod 600 {ca_key}` (and consider the CA exposed)")
    try:
        cert = x509.load_pem_x509_certificate(ca_pem.read_bytes())
        key = serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"the CA in '{folder}' cannot be read ({exc}); choose an empty --out "
                          "folder for a new CA") from None
    pub = serialization.PublicFormat.SubjectPublicKeyInfo
    enc = serialization.Encoding.PEM
    if cert.public_key().public_bytes(enc, pub) != key.public_key().public_bytes(enc, pub):
        raise ConfigError(f"'{ca_key}' is not the key of '{ca_pem}'; restore the matching pair "
                          "or choose an empty --out folder")
    if cert.not_valid_after_utc <= datetime.datetime.now(datetime.UTC):
        raise ConfigError(f"the CA in '{ca_pem}' expired on {cert.not_valid_after_utc:%Y-%m-%d};"
                          " choose an empty --out folder for a new CA (and give every "
                          "organisation its ca.pem)")
    return cert, key


def trial_certificates(folder: str | Path, hosts: tuple[str, ...] = LOOPBACK,
                       days: int = 30) -> dict[str, Path]:
    """Write ``superlink.pem`` and ``superlink.key`` (0600) into ``folder``, signed by the CA
    kept there (``ca.pem``, ``ca.key`` 0600), made first if the folder has none. The certificate
    covers ``hosts``, loopback, and every host the folder's previous certificate covered. Returns
    the paths (``ca``, ``ca_key``, ``cert``, ``key``) and whether the CA was reused
    (``paths["reused"]`` is the CA path then)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    paths = {"ca": folder / "ca.pem", "ca_key": folder / "ca.key",
             "cert": folder / "superlink.pem", "key": folder / "superlink.key"}
    pem = serialization.Encoding.PEM
    loaded = _load_ca(folder)
    if loaded is None:
        ca_key = ec.generate_private_key(ec.SECP384R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fedgl trial CA")])
        ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
              .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(minutes=5))
              .not_valid_after(now + datetime.timedelta(days=max(days, CA_DAYS)))
              .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
              .sign(ca_key, hashes.SHA256()))
        _write_private(paths["ca_key"], ca_key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        paths["ca"].write_bytes(ca.public_bytes(pem))
    else:
        ca, ca_key = loaded
        paths["reused"] = paths["ca"]
    previous = covered_hosts(paths["cert"]) if loaded is not None else []
    covered = tuple(dict.fromkeys([*hosts, *previous, *LOOPBACK]))
    key = ec.generate_private_key(ec.SECP384R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, covered[0])]))
            .issuer_name(ca.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(min(now + datetime.timedelta(days=days), ca.not_valid_after_utc))
            .add_extension(x509.SubjectAlternativeName([_general_name(h) for h in covered]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256()))
    _write_private(paths["key"], key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                   serialization.NoEncryption()))
    paths["cert"].write_bytes(cert.public_bytes(pem))
    return paths


def check_transport(address: str, root_certificates: str | None, timeout: float = 5.0) -> None:
    """Refuse, in one line and within ``timeout`` seconds, a SuperLink whose transport is not the
    one asked for (Flower itself would retry for ever): with ``root_certificates`` the SuperLink
    must complete a TLS handshake whose certificate verifies against that CA *for this address*
    (DNS name or IP address); with ``--insecure`` (None) it must not speak TLS."""
    import socket
    import ssl

    from fedgl.errors import ConfigError

    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if root_certificates is None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context = ssl.create_default_context(cafile=str(root_certificates))
    context.set_alpn_protocols(["h2"])  # what a gRPC client offers
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as raw, \
                context.wrap_socket(raw, server_hostname=host):
            speaks_tls, why = True, ""
    except ssl.SSLCertVerificationError as exc:
        raise ConfigError(
            f"the SuperLink at {address} has a certificate that does not verify against "
            f"--root-certificates '{root_certificates}' ({exc.verify_message}); make one that "
            f"covers {host} with `fedgl certs --host {host} --out DIR` (DIR: the folder holding "
            "ca.key; the organisations keep their ca.pem), or connect by a name the certificate "
            "covers") from None
    except (ssl.SSLError, ConnectionError, TimeoutError) as exc:
        speaks_tls, why = False, str(getattr(exc, "reason", None) or exc)
    except OSError as exc:
        raise ConfigError(f"the SuperLink at {address} is unreachable "
                          f"({exc.strerror or exc}); fix --superlink") from None
    if root_certificates is None and speaks_tls:
        raise ConfigError(f"the SuperLink at {address} speaks TLS but --insecure was given; pass "
                          "--root-certificates CA.pem (the CA that signed its certificate) "
                          "instead")
    if root_certificates is not None and not speaks_tls:
        raise ConfigError(f"the SuperLink at {address} did not complete a TLS handshake ({why}): "
                          "it runs without TLS (then use --insecure, on one machine only) or "
                          "the address is not the SuperLink's")
