"""A throwaway certificate authority for a local stack run with TLS (`up --tls`, the
tests): a CA, the sidecar's server certificate (for localhost, 127.0.0.1 and
qos-sidecar) and a client certificate its Envoy and reporters present. Made with the
`cryptography` library, ECDSA P-256, valid for a week; keys are their owner's alone."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from sidecar.grpc_tls import TlsFiles
from sidecar.tooling.stack.envoy_config import SIDECAR_NAME

SERVER_NAME = SIDECAR_NAME  # what a client checks the sidecar's certificate for
_VALID = datetime.timedelta(days=7)


@dataclass(frozen=True)
class LocalPki:
    ca: Path
    server: TlsFiles  # the sidecar's: its certificate, key, and the CA clients come from
    client: TlsFiles  # Envoy's and the reporters': theirs, and the CA the sidecar is from


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.touch(mode=0o600)
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _issue(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
    usages: list[x509.ObjectIdentifier],
    dns_names: Sequence[str] = (),
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, signer = issuer if issuer is not None else (_name(subject), key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALID)
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    if ExtendedKeyUsageOID.SERVER_AUTH in usages:
        names += [
            x509.DNSName(SERVER_NAME),
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        ]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(signer, hashes.SHA256())


def make_local_pki(directory: Path, client_name: str = "") -> LocalPki:
    """`client_name`: a DNS name the client certificate carries (a gateway's proxies
    prove themselves by it: QOS_ENVOY_CLIENT_NAME)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _issue("qos-sidecar local CA", ca_key, None, [])
    ca_path = directory / "ca.crt"
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    made = {}
    # The server's serves as a client's too, as one Secret does for a gateway pod's
    # sidecar and Envoy (deploy/kubernetes).
    for who, usages in (
        ("server", [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
        ("client", [ExtendedKeyUsageOID.CLIENT_AUTH]),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        names = [client_name] if who == "client" and client_name else []
        cert = _issue(f"qos-sidecar {who}", key, (ca.subject, ca_key), usages, names)
        cert_path, key_path = directory / f"{who}.crt", directory / f"{who}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, key_path)
        made[who] = TlsFiles(cert_path, key_path, ca_path)
    return LocalPki(ca_path, made["server"], made["client"])
