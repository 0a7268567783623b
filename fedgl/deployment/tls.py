"""TLS for a deployment: self-signed trial certificates (``fedgl certs``; docs/deployment.md
gives the equivalent openssl commands), a CA and a SuperLink certificate it signed, for the given
host names and IP addresses, and the check that a SuperLink speaks the transport a command was
given (TLS verified for its address, or none). Production deployments use certificates from the
organisations' own PKI."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path


def trial_certificates(folder: str | Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
                       days: int = 30) -> dict[str, Path]:
    """Write ``ca.pem``, ``superlink.pem`` and ``superlink.key`` (0600) into ``folder``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fedgl trial CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=days))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP384R1())
    names: list[x509.GeneralName] = []
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    paths = {"ca": folder / "ca.pem", "cert": folder / "superlink.pem",
             "key": folder / "superlink.key"}
    paths["ca"].write_bytes(ca.public_bytes(pem))
    paths["cert"].write_bytes(cert.public_bytes(pem))
    paths["key"].touch(mode=0o600)
    paths["key"].write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
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
            f"covers {host} with `fedgl certs --host {host} --out DIR`, or connect by a name the "
            "certificate covers") from None
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
