"""TLS on the client port (``GrpcFrontDoor`` with ``tls_cert_file``): clients verify the node against the CA,
client certificates are asked for per ``tls_client_auth``, a plaintext client cannot talk to it, and rotated
files are served to new connections without a restart."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable, Coroutine
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
from cryptography import x509
from grpc_health.v1 import health_pb2, health_pb2_grpc

from multiraft import TlsSettings
from multiraft.config.node import NodeConfig
from multiraft.errors import ConfigError
from multiraft.security.tls import KeyPair, make_ca, make_client_certificate, make_node_certificate, write_key_pair
from rpc.client._tls import tls_hint
from rpc.server.front_door import GrpcFrontDoor
from rpc.server.tls import client_port_credentials
from tests.rpc.test_isolation import FaultyServices


class _Pki:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.ca = make_ca()
        self.ca_file = directory / "ca.pem"
        self.ca_file.write_bytes(self.ca.certificate_pem)
        self.node = make_node_certificate(self.ca, 1)
        write_key_pair(self.node, directory / "node.pem", directory / "node-key.pem")

    def client(self, name: str, ca: KeyPair | None = None) -> TlsSettings:
        pair = make_client_certificate(ca or self.ca, name)
        write_key_pair(pair, self.directory / f"{name}.pem", self.directory / f"{name}-key.pem")
        cert, key = self.directory / f"{name}.pem", self.directory / f"{name}-key.pem"
        return TlsSettings(str(self.ca_file), str(cert), str(key))

    def node_keys(self, **keys: Any) -> dict[str, Any]:
        return {
            "tls_cert_file": str(self.directory / "node.pem"),
            "tls_key_file": str(self.directory / "node-key.pem"),
            "tls_ca_file": str(self.ca_file),
            **keys,
        }


def _serve(tmp_path: Path, scenario: Callable[[str], Coroutine[Any, Any, Any]], **keys: Any) -> Any:
    base = NodeConfig(node_id=1, data_dir=str(tmp_path), client_address="127.0.0.1:0")
    config = replace(base, **keys).validate()

    async def run() -> Any:
        door = GrpcFrontDoor(config)
        services = FaultyServices()
        await door.start(
            SimpleNamespace(data=services, offsets=services, admin=services, security=services, groups=None)
        )  # type: ignore[arg-type]
        await door.set_serving(True)
        try:
            return await scenario(f"127.0.0.1:{door.port}")
        finally:
            await door.stop()

    return asyncio.run(asyncio.wait_for(run(), 60))


async def _health(address: str, tls: TlsSettings | None) -> str:
    """SERVING, or the status code of the failed call."""
    channel = (
        grpc.aio.secure_channel(address, tls.credentials()) if tls else grpc.aio.insecure_channel(address)
    )  # fmt: skip
    async with channel:
        try:
            response = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        except grpc.aio.AioRpcError as exc:
            return str(exc.code().name)
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(response.status))


def test_a_tls_port_serves_clients_that_trust_its_ca_and_refuses_plaintext(tmp_path: Path) -> None:
    pki = _Pki(tmp_path)

    async def scenario(address: str) -> list[str]:
        other = tmp_path / "other-ca.pem"
        other.write_bytes(make_ca("another CA").certificate_pem)
        return [
            await _health(address, TlsSettings(str(pki.ca_file))),
            await _health(address, None),
            await _health(address, TlsSettings(str(other))),
        ]

    assert _serve(tmp_path, scenario, **pki.node_keys()) == ["SERVING", "UNAVAILABLE", "UNAVAILABLE"]


def test_required_client_certificates_refuse_a_client_without_one_or_with_another_ca_s(tmp_path: Path) -> None:
    pki = _Pki(tmp_path)

    async def scenario(address: str) -> list[str]:
        return [
            await _health(address, pki.client("alice")),
            await _health(address, TlsSettings(str(pki.ca_file))),
            await _health(address, pki.client("mallory", ca=make_ca("mallory's CA"))),
        ]

    keys = pki.node_keys(tls_client_auth="required")
    assert _serve(tmp_path, scenario, **keys) == ["SERVING", "UNAVAILABLE", "UNAVAILABLE"]


def _served_serial(address: str, ca_file: Path) -> int:
    host, _, port = address.rpartition(":")
    context = ssl.create_default_context(cafile=str(ca_file))
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection((host, int(port)), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=host) as wrapped,
    ):
        der = wrapped.getpeercert(binary_form=True)
    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)


def test_new_connections_get_the_rotated_certificate_and_old_clients_keep_working(tmp_path: Path) -> None:
    pki = _Pki(tmp_path)
    rotated = make_node_certificate(pki.ca, 1)

    async def scenario(address: str) -> tuple[int, int, str]:
        loop = asyncio.get_running_loop()
        before = await loop.run_in_executor(None, _served_serial, address, pki.ca_file)
        write_key_pair(rotated, tmp_path / "node.pem", tmp_path / "node-key.pem")
        after = before
        async with asyncio.timeout(20):
            while after == before:
                await asyncio.sleep(0.1)
                after = await loop.run_in_executor(None, _served_serial, address, pki.ca_file)
        return before, after, await _health(address, TlsSettings(str(pki.ca_file)))

    before, after, health = _serve(tmp_path, scenario, **pki.node_keys(tls_reload_interval_s=0.05))
    assert before == pki.node.certificate.serial_number
    assert after == rotated.certificate.serial_number
    assert health == "SERVING"


def test_a_key_that_does_not_belong_to_the_certificate_is_named_at_start(tmp_path: Path) -> None:
    pki = _Pki(tmp_path)
    (tmp_path / "node-key.pem").write_bytes(make_node_certificate(pki.ca, 1).key_pem)
    config = replace(NodeConfig(node_id=1, data_dir=str(tmp_path)), **pki.node_keys()).validate()
    with pytest.raises(ConfigError) as raised:
        client_port_credentials(config)
    assert raised.value.field == "tls_key_file"


def test_client_tls_settings_name_a_lone_certificate_or_key_and_an_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as lone:
        TlsSettings(ca_file="", cert_file="me.pem")
    assert lone.value.field == "key_file"
    with pytest.raises(ConfigError) as unreadable:
        TlsSettings(ca_file=str(tmp_path / "missing.pem")).credentials()
    assert unreadable.value.field == "ca_file"


def test_a_tls_mismatch_between_client_and_port_is_explained() -> None:
    closed = "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:1: Socket closed"
    with_ca, with_cert = TlsSettings("ca.pem"), TlsSettings("ca.pem", "me.pem", "me-key.pem")
    assert "may require TLS" in (tls_hint(closed, None) or "")
    assert "may require a client certificate" in (tls_hint(closed, with_ca) or "")
    assert tls_hint(closed, with_cert) is None
    wrong = "Tls handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: WRONG_VERSION_NUMBER"
    assert "does not speak TLS" in (tls_hint(wrong, with_ca) or "")
    assert tls_hint("Connection refused", with_ca) is None
