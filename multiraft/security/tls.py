"""TLS material of a node: certificates for a local cluster, the watched PEM files, and the peer port's contexts.

* :func:`make_ca`, :func:`make_node_certificate`, :func:`make_client_certificate` and
  :func:`write_cluster_certificates` create what ``scripts/cluster up --secure`` needs (``cryptography``, no
  hand-rolled crypto). A node certificate names the node (SAN DNS ``node-<id>``) and the loopback (``localhost``,
  ``127.0.0.1``), so it serves both the client port and the peer port; a client certificate's subject CN is
  its principal.
* :class:`TlsFiles` reads ``tls_cert_file``, ``tls_key_file`` and ``tls_ca_file`` and reads them again when
  they change (looked at every ``tls_reload_interval_s``). A half-done rotation (a key that does not match
  the certificate, a truncated file) is ignored until it is complete: the old material stays in use.
* :class:`PeerTls` builds the peer port's mutual-TLS :class:`ssl.SSLContext` objects from them, afresh when
  the files changed, for new connections; :func:`peer_node_names` reads the node ids a verified certificate
  proves.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from multiraft.config.security import SecuritySettings
from multiraft.errors import ConfigError
from multiraft.logging import get_logger

__all__ = [
    "KeyPair",
    "PeerTls",
    "TlsFiles",
    "TlsMaterial",
    "make_ca",
    "make_client_certificate",
    "make_node_certificate",
    "node_name",
    "peer_node_names",
    "peer_tls",
    "write_cluster_certificates",
    "write_key_pair",
]

log = get_logger(__name__)

_VALID_DAYS = 825  # the longest lifetime common TLS clients accept for a leaf certificate
_CLOCK_SKEW = datetime.timedelta(minutes=5)


def node_name(node_id: int) -> str:
    """The SAN DNS name that proves a node id on the peer port."""
    return f"node-{node_id}"


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, PEM-encoded."""

    certificate_pem: bytes
    key_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.certificate_pem)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _sign(
    subject: str,
    issuer: KeyPair | None,
    extensions: list[tuple[x509.ExtensionType, bool]],
    valid_days: int,
) -> KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    if issuer is None:
        issuer_name, signing_key = _name(subject), key
    else:
        issuer_name = issuer.certificate.subject
        signing_key = serialization.load_pem_private_key(issuer.key_pem, None)  # type: ignore[assignment]
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CLOCK_SKEW)
        .not_valid_after(now + datetime.timedelta(days=valid_days))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    certificate = builder.sign(signing_key, hashes.SHA256())
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return KeyPair(certificate.public_bytes(serialization.Encoding.PEM), key_pem)


def make_ca(name: str = "multiraft local CA", valid_days: int = 3650) -> KeyPair:
    """A self-signed certificate authority that may sign certificates, not other authorities."""
    usage = x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
        key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False,
    )  # fmt: skip
    return _sign(name, None, [(x509.BasicConstraints(ca=True, path_length=0), True), (usage, True)], valid_days)


def _leaf_usage() -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
        key_agreement=True, key_cert_sign=False, crl_sign=False, encipher_only=False, decipher_only=False,
    )  # fmt: skip


def make_node_certificate(
    ca: KeyPair, node_id: int, hosts: tuple[str, ...] = ("localhost", "127.0.0.1"), valid_days: int = _VALID_DAYS
) -> KeyPair:
    """A node's certificate: SAN DNS ``node-<id>`` plus ``hosts`` (names or IP addresses), for serving
    (client and peer ports) and for dialling peers."""
    names: list[x509.GeneralName] = [x509.DNSName(node_name(node_id))]
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    usage = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH])
    extensions: list[tuple[x509.ExtensionType, bool]] = [
        (x509.BasicConstraints(ca=False, path_length=None), True),
        (_leaf_usage(), True),
        (usage, False),
        (x509.SubjectAlternativeName(names), False),
    ]
    return _sign(node_name(node_id), ca, extensions, valid_days)


def make_client_certificate(ca: KeyPair, principal: str, valid_days: int = _VALID_DAYS) -> KeyPair:
    """A client's certificate; its subject CN is the principal's name (``User:<principal>``)."""
    extensions: list[tuple[x509.ExtensionType, bool]] = [
        (x509.BasicConstraints(ca=False, path_length=None), True),
        (_leaf_usage(), True),
        (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), False),
    ]
    return _sign(principal, ca, extensions, valid_days)


def write_key_pair(pair: KeyPair, cert_path: Path, key_path: Path) -> None:
    """Write both files, each replaced atomically, the key readable by its owner only."""
    _write_atomic(key_path, pair.key_pem, 0o600)
    _write_atomic(cert_path, pair.certificate_pem, 0o644)


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(descriptor, mode)
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        Path(temporary).replace(path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_cluster_certificates(directory: Path, node_ids: list[int], clients: tuple[str, ...] = ("admin",)) -> Path:
    """A CA, one certificate per node and per client principal, under ``directory`` (``ca.pem``,
    ``node-<id>.pem``/``node-<id>-key.pem``, ``<client>.pem``/``<client>-key.pem``); returns ``directory``.
    The CA's key stays next to them (``ca-key.pem``), so nodes added later get certificates too."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = directory / "ca-key.pem"
    if ca_key.exists():
        ca = KeyPair((directory / "ca.pem").read_bytes(), ca_key.read_bytes())
    else:
        ca = make_ca()
        write_key_pair(ca, directory / "ca.pem", ca_key)
    for node_id in node_ids:
        pair = make_node_certificate(ca, node_id)
        write_key_pair(pair, directory / f"{node_name(node_id)}.pem", directory / f"{node_name(node_id)}-key.pem")
    for client in clients:
        pair = make_client_certificate(ca, client)
        write_key_pair(pair, directory / f"{client}.pem", directory / f"{client}-key.pem")
    return directory


# ------------------------------------------------------------------------------------------ watched files


@dataclass(frozen=True)
class TlsMaterial:
    """One consistent reading of the TLS files; ``version`` grows by one each time they change."""

    certificate_pem: bytes
    key_pem: bytes
    ca_pem: bytes
    version: int


def _stamp(path: str) -> tuple[int, int, int]:
    stat = Path(path).stat()
    return stat.st_ino, stat.st_mtime_ns, stat.st_size


class TlsFiles:
    """Thread-safe. :meth:`current` is cheap: the files are looked at (stat) at most every
    ``reload_interval_s`` and read again only when one of them changed."""

    def __init__(
        self,
        cert_file: str,
        key_file: str,
        ca_file: str,
        reload_interval_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._paths = (cert_file, key_file, ca_file)
        self._interval = reload_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._stamps = self._stamps_now()
        material = self._read(version=1)
        if isinstance(material, tuple):
            raise ConfigError(*material)
        self._material = material
        self._next_check = clock() + reload_interval_s

    def current(self) -> TlsMaterial:
        with self._lock:
            now = self._clock()
            if now < self._next_check:
                return self._material
            self._next_check = now + self._interval
            stamps = self._stamps_now()
            if stamps == self._stamps:
                return self._material
            material = self._read(self._material.version + 1)
            if isinstance(material, tuple):
                log.warning("TLS files changed but are not usable yet; keeping the ones in use", reason=material[1])
                return self._material
            self._stamps, self._material = stamps, material
            log.info("TLS files reloaded", certificate=self._paths[0], version=material.version)
            return material

    def _stamps_now(self) -> tuple[tuple[int, int, int], ...]:
        stamps = []
        for path in self._paths:
            try:
                stamps.append(_stamp(path))
            except OSError:  # missing, or being replaced: read (and report) it below
                stamps.append((0, 0, 0))
        return tuple(stamps)

    def _read(self, version: int) -> TlsMaterial | tuple[str, str]:
        """The files' material, or (the key naming the file that is not usable, why)."""
        keys = ("tls_cert_file", "tls_key_file", "tls_ca_file")
        contents: list[bytes] = []
        for key, path in zip(keys, self._paths, strict=True):
            try:
                contents.append(Path(path).read_bytes())
            except OSError as exc:
                return key, f"cannot read {path}: {exc.strerror or exc}"
        certificate_pem, key_pem, ca_pem = contents
        try:
            certificate = x509.load_pem_x509_certificates(certificate_pem)[0]
        except ValueError as exc:
            return "tls_cert_file", f"{self._paths[0]} holds no PEM certificate: {exc}"
        try:
            private_key = serialization.load_pem_private_key(key_pem, None)
        except (ValueError, TypeError) as exc:
            return "tls_key_file", f"{self._paths[1]} holds no unencrypted PEM private key: {exc}"
        try:
            x509.load_pem_x509_certificates(ca_pem)
        except ValueError as exc:
            return "tls_ca_file", f"{self._paths[2]} holds no PEM certificate: {exc}"
        if certificate.public_key() != private_key.public_key():
            return "tls_key_file", f"the key in {self._paths[1]} does not belong to the certificate {self._paths[0]}"
        return TlsMaterial(certificate_pem, key_pem, ca_pem, version)


# --------------------------------------------------------------------------------------------- peer port


class PeerTls:
    """The peer port's mutual TLS: both sides present a certificate of ``tls_ca_file``'s authorities and
    verify the other's. A dialling node checks that the peer's certificate names the node it dials
    (``node-<id>``, as a host name); the accepting side checks the HELLO's node id against the certificate
    (:func:`peer_node_names`). Contexts are built again, for new connections, when the files change."""

    def __init__(self, files: TlsFiles) -> None:
        self._files = files
        self._version = 0
        self._server: ssl.SSLContext | None = None
        self._client: ssl.SSLContext | None = None

    def server_context(self) -> ssl.SSLContext:
        self._refresh()
        assert self._server is not None
        return self._server

    def client_context(self) -> ssl.SSLContext:
        self._refresh()
        assert self._client is not None
        return self._client

    def listening_context(self) -> ssl.SSLContext:
        """The listener's context: it hands each new handshake the current :meth:`server_context`, so a
        listener started once serves rotated certificates (an SNI callback may switch the context)."""
        context = _context(ssl.PROTOCOL_TLS_SERVER, self._files.current())
        context.sni_callback = self._use_current
        return context

    def _use_current(self, connection: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext) -> None:
        current = self.server_context()
        if current is not context:
            connection.context = current

    def dial_options(self, node_id: int) -> dict[str, Any]:
        """``open_connection`` arguments to dial node ``node_id``, which must prove its id (``node-<id>``)."""
        return {"ssl": self.client_context(), "server_hostname": node_name(node_id)}

    def _refresh(self) -> None:
        material = self._files.current()
        if material.version == self._version:
            return
        try:
            server, client = _context(ssl.PROTOCOL_TLS_SERVER, material), _context(ssl.PROTOCOL_TLS_CLIENT, material)
        except (ssl.SSLError, OSError) as exc:
            if self._server is None:
                raise ConfigError("tls_cert_file", f"unusable for TLS: {exc}") from exc
            log.warning("new TLS files unusable for the peer port; keeping the ones in use", error=str(exc))
            self._version = material.version  # not again until the files change again
            return
        self._server, self._client, self._version = server, client, material.version


def _context(protocol: int, material: TlsMaterial) -> ssl.SSLContext:
    context = ssl.SSLContext(protocol)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(cadata=material.ca_pem.decode())
    # ssl loads a key pair from files only: a private temporary copy of the checked material.
    with tempfile.TemporaryDirectory(prefix="multiraft-tls-") as scratch:
        cert_path, key_path = Path(scratch, "cert.pem"), Path(scratch, "key.pem")
        cert_path.write_bytes(material.certificate_pem)
        key_path.touch(mode=0o600)
        key_path.write_bytes(material.key_pem)
        context.load_cert_chain(cert_path, key_path)
    return context


def peer_node_names(peer_certificate: dict[str, Any] | None) -> set[int]:
    """The node ids a verified peer certificate (``SSLObject.getpeercert()``) proves: its SAN DNS names
    ``node-<id>``."""
    if not peer_certificate:
        return set()
    ids: set[int] = set()
    for kind, value in peer_certificate.get("subjectAltName", ()):
        if kind == "DNS" and value.startswith("node-") and value[5:].isdigit():
            ids.add(int(value[5:]))
    return ids


def peer_tls(settings: SecuritySettings) -> PeerTls | None:
    """The peer port's TLS from a node's configuration; None when ``tls_cert_file`` is empty (plaintext)."""
    if not settings.tls_cert_file:
        return None
    files = TlsFiles(
        settings.tls_cert_file, settings.tls_key_file, settings.tls_ca_file, settings.tls_reload_interval_s
    )
    return PeerTls(files)
