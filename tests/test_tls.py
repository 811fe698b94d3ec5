"""Certificates for a local cluster (``multiraft.security.tls``): what each one names and may do, and how a verified
peer certificate proves node ids."""

from __future__ import annotations

import ipaddress
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from multiraft.security.tls import (
    make_ca,
    make_client_certificate,
    make_node_certificate,
    peer_node_names,
    write_cluster_certificates,
)


def test_a_node_certificate_names_the_node_and_the_loopback_for_both_ports() -> None:
    ca = make_ca()
    certificate = make_node_certificate(ca, 7).certificate
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["node-7", "localhost"]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    usage = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usage) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert certificate.issuer == ca.certificate.subject
    certificate.verify_directly_issued_by(ca.certificate)


def test_a_client_certificate_s_subject_is_its_principal_and_it_cannot_serve() -> None:
    ca = make_ca()
    certificate = make_client_certificate(ca, "alice").certificate
    assert certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "alice"
    usage = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    constraints = ca.certificate.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca and constraints.path_length == 0


def test_cluster_certificates_keep_their_ca_when_more_are_made(tmp_path: Path) -> None:
    write_cluster_certificates(tmp_path, [1, 2])
    ca = (tmp_path / "ca.pem").read_bytes()
    write_cluster_certificates(tmp_path, [3], clients=())
    assert (tmp_path / "ca.pem").read_bytes() == ca
    issuer = x509.load_pem_x509_certificate(ca)
    for name in ("node-1", "node-2", "node-3", "admin"):
        x509.load_pem_x509_certificate((tmp_path / f"{name}.pem").read_bytes()).verify_directly_issued_by(issuer)
        assert (tmp_path / f"{name}-key.pem").stat().st_mode & 0o077 == 0  # keys are private


def test_python_s_ssl_verifies_the_certificates_and_sees_the_node_id(tmp_path: Path) -> None:
    write_cluster_certificates(tmp_path, [4])
    context = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
    context.load_cert_chain(tmp_path / "node-4.pem", tmp_path / "node-4-key.pem")  # the chain loads with its key
    decoded = ssl._ssl._test_decode_cert(str(tmp_path / "node-4.pem"))  # type: ignore[attr-defined]
    assert peer_node_names(decoded) == {4}
    assert peer_node_names({"subjectAltName": (("DNS", "node-x"), ("DNS", "nodes-5"), ("IP Address", "1"))}) == set()
    assert peer_node_names(None) == set()
