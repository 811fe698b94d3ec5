"""TLS on the client port: gRPC server credentials that follow the node's TLS files without a restart.

gRPC asks :class:`_CertificateFetcher` for the certificate configuration at each new handshake; it answers
None (keep the one in use) until :class:`multiraft.security.tls.TlsFiles` has read changed files, and then the new
one. Connections already open keep the certificate they were made with.

Client certificates (``tls_client_auth``): ``required`` makes the handshake ask for one and verify it against
``tls_ca_file`` (a client without one is refused). gRPC's Python binding can only require a client
certificate or not ask for one, so ``requested`` does not ask: clients connect with or without a
certificate, and a certificate is not seen by the node (docs/security.md).
"""

from __future__ import annotations

import threading

import grpc

from multiraft.config.node import NodeConfig
from multiraft.logging import get_logger
from multiraft.security.tls import TlsFiles, TlsMaterial

__all__ = ["client_port_credentials"]

log = get_logger(__name__)


def _configuration(material: TlsMaterial) -> grpc.ServerCertificateConfiguration:
    return grpc.ssl_server_certificate_configuration(
        [(material.key_pem, material.certificate_pem)], root_certificates=material.ca_pem
    )


class _CertificateFetcher:
    def __init__(self, files: TlsFiles) -> None:
        self._files = files
        self._lock = threading.Lock()
        self._version = files.current().version

    def __call__(self) -> grpc.ServerCertificateConfiguration | None:
        try:
            material = self._files.current()
        except Exception as exc:  # never fail a handshake over a reload: keep the configuration in use
            log.warning("checking the TLS files failed", error=repr(exc))
            return None
        with self._lock:
            if material.version == self._version:
                return None
            self._version = material.version
        log.info("client port serves the reloaded certificate", version=material.version)
        return _configuration(material)


def client_port_credentials(config: NodeConfig) -> grpc.ServerCredentials:
    """Credentials for ``add_secure_port`` from the node's TLS keys (``tls_cert_file`` must be set)."""
    files = TlsFiles(config.tls_cert_file, config.tls_key_file, config.tls_ca_file, config.tls_reload_interval_s)
    if config.tls_client_auth == "requested":
        log.warning(
            "tls_client_auth = requested: gRPC cannot ask for an optional client certificate, so the client "
            "port does not ask for one; use required for certificate principals"
        )
    return grpc.dynamic_ssl_server_credentials(
        _configuration(files.current()),
        _CertificateFetcher(files),  # type: ignore[arg-type]  # None keeps the configuration (grpc docs)
        require_client_authentication=config.tls_client_auth == "required",
    )
