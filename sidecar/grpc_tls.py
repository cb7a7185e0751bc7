"""TLS on the sidecar's gRPC port, mutual where the client must prove itself, from
certificate files that are read again when they change (a Secret rotated by
cert-manager, a renewal): a new connection's handshake uses the files as they are then;
connections already open keep theirs.

Plaintext is for loopback: a sidecar whose gRPC port is reachable from other machines
serves TLS there, unless told outright that the network it crosses is private
(`--grpc-plaintext`, for a single-host container network).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import grpc

from sidecar.addresses import is_loopback

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TlsFiles:
    """A certificate chain and its key (PEM), and the CA a peer's certificate must chain
    to: the server's client CA (mTLS when given), or a client's server CA."""

    cert: Path | None
    key: Path | None
    ca: Path | None

    @classmethod
    def given(cls, cert: str, key: str, ca: str, flags: str) -> TlsFiles | None:
        """From settings ("" for none); None when no file is given. `flags` names them."""
        if not (cert or key or ca):
            return None
        if bool(cert) != bool(key):
            raise SystemExit(f"{flags}: a certificate and its key go together")
        return cls(
            Path(cert) if cert else None, Path(key) if key else None, Path(ca) if ca else None
        )

    def _paths(self) -> tuple[Path, ...]:
        return tuple(p for p in (self.cert, self.key, self.ca) if p is not None)

    def signature(self) -> tuple[tuple[int, int, int], ...]:
        """What changes when any file is replaced (inode, size, modification time)."""
        found = []
        for path in self._paths():
            seen = os.stat(path)  # follows a Secret's ..data link to the files of the day
            found.append((seen.st_ino, seen.st_size, seen.st_mtime_ns))
        return tuple(found)

    def read(self) -> tuple[bytes | None, bytes | None, bytes | None]:
        def content(path: Path | None) -> bytes | None:
            return path.read_bytes() if path is not None else None

        return content(self.cert), content(self.key), content(self.ca)


def check_listener(host: str, tls: TlsFiles | None, plaintext_allowed: bool) -> None:
    """Refuse, at start, plaintext on a port other machines reach."""
    if tls is None and not is_loopback(host) and not plaintext_allowed:
        raise SystemExit(
            f"--grpc-host {host} is reachable from other machines: serve TLS there "
            "(--tls-cert-file and --tls-key-file, and --tls-client-ca-file for mutual TLS), "
            "or say --grpc-plaintext if the network it crosses is private"
        )
    if tls is not None and tls.cert is None:
        raise SystemExit(
            "--tls-client-ca-file: serving TLS needs --tls-cert-file and --tls-key-file"
        )


class _Reloading:
    def __init__(self, files: TlsFiles) -> None:
        self._files = files
        self._seen = files.signature()
        self.initial = self._configuration()

    def _configuration(self) -> grpc.ServerCertificateConfiguration:
        cert, key, ca = self._files.read()
        assert cert is not None and key is not None
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """gRPC asks at each new handshake: a new configuration when the files changed."""
        try:
            seen = self._files.signature()
            if seen == self._seen:
                return None
            configuration = self._configuration()
        except (OSError, ValueError) as error:  # caught half-way through a rotation
            log.warning("TLS files not read again, the ones before serve: %s", error)
            return None
        self._seen = seen
        log.info("TLS certificate read again", extra={"file": str(self._files.cert)})
        return configuration


def server_credentials(files: TlsFiles) -> grpc.ServerCredentials:
    reloading = _Reloading(files)
    return grpc.dynamic_ssl_server_credentials(
        reloading.initial,
        reloading.fetch,
        require_client_authentication=files.ca is not None,
    )


def channel_credentials(files: TlsFiles) -> grpc.ChannelCredentials:
    """A client's: the server's CA (None: the system's), and its own certificate when the
    server asks for one."""
    cert, key, ca = files.read()
    return grpc.ssl_channel_credentials(
        root_certificates=ca, private_key=key, certificate_chain=cert
    )
