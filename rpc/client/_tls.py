"""TLS for the client's gRPC channels: :class:`TlsSettings` and the channels built from it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from multiraft.errors import ConfigError

__all__ = ["TlsSettings", "open_channel", "open_aio_channel", "tls_hint"]


@dataclass(frozen=True)
class TlsSettings:
    """How a client reaches a cluster over TLS.

    * ``ca_file``: PEM bundle of the authorities the nodes' certificates are checked against; empty: the
      system's trusted roots.
    * ``cert_file`` and ``key_file``: this client's certificate and key (PEM), for clusters that ask for
      client certificates (``tls_client_auth``); the certificate's subject is the client's principal. Both
      or neither.

    The files are read when a client is created; a new client reads them again.
    """

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            key = "key_file" if self.cert_file else "cert_file"
            raise ConfigError(key, "cert_file and key_file go together")

    def credentials(self) -> grpc.ChannelCredentials:
        """gRPC channel credentials from the files (raises :class:`ConfigError` naming an unreadable one)."""
        return grpc.ssl_channel_credentials(
            root_certificates=_read("ca_file", self.ca_file),
            private_key=_read("key_file", self.key_file),
            certificate_chain=_read("cert_file", self.cert_file),
        )


def _read(name: str, path: str) -> bytes | None:
    if not path:
        return None
    try:
        return Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise ConfigError(name, f"cannot read {path}: {exc.strerror or exc}") from exc


Options = Sequence[tuple[str, Any]]


def open_channel(address: str, options: Options, credentials: grpc.ChannelCredentials | None) -> grpc.Channel:
    if credentials is None:
        return grpc.insecure_channel(address, options=options)
    return grpc.secure_channel(address, credentials, options=options)


def open_aio_channel(
    address: str, options: Options, credentials: grpc.ChannelCredentials | None, interceptors: Sequence[Any] = ()
) -> grpc.aio.Channel:
    """``interceptors``: the client's token (rpc.client._auth), if it has a user."""
    if credentials is None:
        return grpc.aio.insecure_channel(address, options=options, interceptors=list(interceptors) or None)
    return grpc.aio.secure_channel(address, credentials, options=options, interceptors=list(interceptors) or None)


def tls_hint(transport_error: str, tls: TlsSettings | None) -> str | None:
    """Why a connection failed, when the cause is likely a TLS mismatch between the client and the port."""
    text = transport_error.lower()
    if tls is None and "socket closed" in text:
        return (
            "the node closed the connection; it may require TLS: pass TlsSettings(ca_file=...) to the client "
            "(--tls-ca or MULTIRAFT_TLS_CA on the command line)"
        )
    if tls is not None and not tls.cert_file and "socket closed" in text:
        return (
            "the node closed the connection during TLS; it may require a client certificate: pass "
            "TlsSettings(cert_file=..., key_file=...) (--tls-cert and --tls-key on the command line)"
        )
    if tls is not None and "wrong_version_number" in text:
        return "TLS handshake failed: the node does not speak TLS on this port (drop the TLS settings?)"
    if tls is not None and ("ssl" in text or "handshake" in text or "certificate" in text or "tsi" in text):
        return f"TLS handshake failed ({transport_error.strip()}); check the CA, the node's certificate and the port"
    return None
