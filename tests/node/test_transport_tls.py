"""Mutual TLS on the peer port: only a node with a certificate of the cluster's CA that names the node id it
says it is can send Raft traffic or peer requests; a node with another CA's certificate, a certificate of
another node, or no TLS at all is refused before any frame is used; new certificates are picked up without
a restart."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from cryptography import x509

from multiraft.node.peer import transport as transport_module
from multiraft.node.peer.transport import PeerTransport
from multiraft.security.tls import (
    KeyPair,
    PeerTls,
    TlsFiles,
    make_ca,
    make_node_certificate,
    node_name,
    write_key_pair,
)
from tests.node.test_transport import Inbox, _append, _hello

_SETTLE_S = 1.0  # how long a refused sender gets to (fail to) deliver


def _files(directory: Path, ca: KeyPair, pair: KeyPair, name: str) -> tuple[Path, Path, Path]:
    cert, key, ca_file = directory / f"{name}.pem", directory / f"{name}-key.pem", directory / f"{name}-ca.pem"
    write_key_pair(pair, cert, key)
    ca_file.write_bytes(ca.certificate_pem)
    return cert, key, ca_file


def _tls(directory: Path, ca: KeyPair, pair: KeyPair, name: str, reload_s: float = 60.0) -> PeerTls:
    cert, key, ca_file = _files(directory, ca, pair, name)
    return PeerTls(TlsFiles(str(cert), str(key), str(ca_file), reload_s))


def _transport(node_id: int, inbox: Inbox, tls: PeerTls | None) -> PeerTransport:
    async def answer(from_node: int, kind: int, body: bytes) -> tuple[int, bytes]:
        return 0, b"answer from %d to %d" % (node_id, from_node)

    return PeerTransport(
        node_id=node_id,
        cluster_id="test",
        listen="127.0.0.1:0",
        deliver=inbox.deliver,
        on_unreachable=inbox.unreachable.append,
        handle_request=answer,
        heartbeat_interval_s=None,
        tls=tls,
    )


@asynccontextmanager
async def _pair(
    tls1: PeerTls | None, tls2: PeerTls | None
) -> AsyncIterator[tuple[PeerTransport, PeerTransport, Inbox, Inbox]]:
    """Node 1 and node 2, each knowing the other as a peer, and what each received."""
    inbox1, inbox2 = Inbox(), Inbox()
    one, two = _transport(1, inbox1, tls1), _transport(2, inbox2, tls2)
    await one.start()
    await two.start()
    one.set_peer(2, f"127.0.0.1:{two.port}")
    two.set_peer(1, f"127.0.0.1:{one.port}")
    try:
        yield one, two, inbox1, inbox2
    finally:
        await one.stop()
        await two.stop()


async def _send_for(sender: PeerTransport, to: int, seconds: float) -> None:
    """Keep sending a Raft message (and dialling) for a while."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    for _ in range(1000):
        if loop.time() >= end:
            return
        sender.send(to, [(7, _append(to, sender.node_id, b"raft traffic"))])
        await asyncio.sleep(0.02)


def test_nodes_with_certificates_of_the_cluster_ca_exchange_raft_messages_and_requests(tmp_path: Path) -> None:
    ca = make_ca()

    async def scenario() -> None:
        tls1 = _tls(tmp_path, ca, make_node_certificate(ca, 1), "n1")
        tls2 = _tls(tmp_path, ca, make_node_certificate(ca, 2), "n2")
        async with _pair(tls1, tls2) as (one, two, _, inbox2):
            async with asyncio.timeout(10):
                while not inbox2.messages:
                    one.send(2, [(7, _append(2, 1, b"over tls"))])
                    await asyncio.sleep(0.02)
            assert inbox2.messages[0][2].entries[0].payload == b"over tls"
            assert await one.call(2, 1, b"question", timeout_s=10) == (0, b"answer from 2 to 1")
            assert await two.call(1, 1, b"question", timeout_s=10) == (0, b"answer from 1 to 2")
            assert one.stats.refused_certificates == two.stats.refused_certificates == 0

    asyncio.run(scenario())


def test_a_node_with_a_certificate_of_another_ca_can_neither_send_raft_traffic_nor_be_dialled(tmp_path: Path) -> None:
    ca, foreign = make_ca(), make_ca("someone else's CA")

    async def scenario() -> None:
        tls1 = _tls(tmp_path, ca, make_node_certificate(ca, 1), "n1")
        # The intruder trusts our CA, so only our side's verification can stop it.
        intruder = _tls(tmp_path, ca, make_node_certificate(foreign, 2), "n2")
        async with _pair(tls1, intruder) as (one, two, inbox1, inbox2):
            await _send_for(two, 1, _SETTLE_S)
            assert inbox1.messages == []
            assert two.stats.connects > 0 and one.stats.frames_in == 0  # it dialled; not one frame was read
            # Dialling it fails too: its certificate is not of our CA.
            await _send_for(one, 2, _SETTLE_S)
            assert not one.connected(2)
            assert one.stats.refused_certificates > 0
            assert inbox2.messages == []
            try:
                await one.call(2, 1, b"question", timeout_s=0.5)
            except TimeoutError:
                pass
            else:
                raise AssertionError("a request reached a node whose certificate is of another CA")

    asyncio.run(scenario())


def test_a_hello_naming_another_node_than_the_certificate_is_refused(tmp_path: Path) -> None:
    ca = make_ca()

    async def scenario() -> None:
        tls1 = _tls(tmp_path, ca, make_node_certificate(ca, 1), "n1")
        # Node 3's certificate, valid and of the cluster's CA, used by a node that says it is node 2.
        impostor = _tls(tmp_path, ca, make_node_certificate(ca, 3), "n3")
        async with _pair(tls1, impostor) as (one, two, inbox1, inbox2):
            await _send_for(two, 1, _SETTLE_S)
            assert inbox1.messages == []
            assert one.stats.refused_certificates > 0
            # And node 1 dialling "node 2" finds a certificate that does not name node 2.
            refused = one.stats.refused_certificates
            await _send_for(one, 2, _SETTLE_S)
            assert not one.connected(2)
            assert inbox2.messages == []
            assert one.stats.refused_certificates > refused

    asyncio.run(scenario())


def test_a_plaintext_peer_is_refused_by_a_tls_peer_port(tmp_path: Path) -> None:
    ca = make_ca()

    async def scenario() -> None:
        tls1 = _tls(tmp_path, ca, make_node_certificate(ca, 1), "n1")
        async with _pair(tls1, None) as (one, two, inbox1, _):
            await _send_for(two, 1, _SETTLE_S)
            assert inbox1.messages == []
            reader, writer = await asyncio.open_connection("127.0.0.1", one.port)
            writer.write(_hello(2, "test"))
            await writer.drain()
            async with asyncio.timeout(10):
                assert await reader.read(100) == b""  # closed: a HELLO in the clear is not a TLS handshake
            writer.close()

    asyncio.run(scenario())


async def _served_serial(port: int, client: ssl.SSLContext, node_id: int) -> int:
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname=node_name(node_id))
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        return int(x509.load_der_x509_certificate(der).serial_number)
    finally:
        writer.close()


def test_a_rotated_certificate_is_served_to_new_connections_without_a_restart(tmp_path: Path) -> None:
    ca = make_ca()

    async def scenario() -> None:
        first, second = make_node_certificate(ca, 1), make_node_certificate(ca, 1)
        tls1 = _tls(tmp_path, ca, first, "n1", reload_s=0.05)
        tls2 = _tls(tmp_path, ca, make_node_certificate(ca, 2), "n2")
        async with _pair(tls1, tls2) as (one, _, _, inbox2):
            client = tls2.client_context()
            assert await _served_serial(one.port, client, 1) == first.certificate.serial_number
            write_key_pair(second, tmp_path / "n1.pem", tmp_path / "n1-key.pem")
            serial = 0
            async with asyncio.timeout(10):
                while serial != second.certificate.serial_number:
                    await asyncio.sleep(0.06)
                    serial = await _served_serial(one.port, client, 1)
            # Node 1 dials with its new certificate, and node 2 accepts it.
            async with asyncio.timeout(10):
                while not inbox2.messages:
                    one.send(2, [(7, _append(2, 1, b"after rotation"))])
                    await asyncio.sleep(0.02)

    asyncio.run(scenario())


def test_a_half_written_rotation_keeps_the_certificate_in_use(tmp_path: Path) -> None:
    ca = make_ca()
    first, second = make_node_certificate(ca, 1), make_node_certificate(ca, 1)
    cert, key, ca_file = _files(tmp_path, ca, first, "n1")
    now = [0.0]
    files = TlsFiles(str(cert), str(key), str(ca_file), 1.0, clock=lambda: now[0])
    cert.write_bytes(second.certificate_pem)  # the new certificate, the old key still in place
    now[0] = 2.0
    assert files.current().certificate_pem == first.certificate_pem
    key.write_bytes(second.key_pem)
    now[0] = 4.0
    material = files.current()
    assert (material.certificate_pem, material.version) == (second.certificate_pem, 2)


def test_a_connection_that_never_finishes_its_handshake_is_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transport_module, "_HELLO_TIMEOUT_S", 0.5)
    ca = make_ca()

    async def scenario() -> None:
        tls1 = _tls(tmp_path, ca, make_node_certificate(ca, 1), "n1")
        async with _pair(tls1, None) as (one, _, _, _):
            reader, writer = await asyncio.open_connection("127.0.0.1", one.port)  # and then silence
            async with asyncio.timeout(20):
                assert await reader.read(100) == b""
            writer.close()

    asyncio.run(scenario())


def test_a_ca_added_to_the_bundle_is_trusted_by_new_connections_without_a_restart(tmp_path: Path) -> None:
    old_ca, new_ca = make_ca("old CA"), make_ca("new CA")

    async def scenario() -> None:
        tls1 = _tls(tmp_path, old_ca, make_node_certificate(old_ca, 1), "n1", reload_s=0.05)
        # Node 2 already has a certificate of the new CA, and trusts both.
        n2_cert, n2_key, n2_ca = _files(tmp_path, new_ca, make_node_certificate(new_ca, 2), "n2")
        n2_ca.write_bytes(old_ca.certificate_pem + new_ca.certificate_pem)
        tls2 = PeerTls(TlsFiles(str(n2_cert), str(n2_key), str(n2_ca), 60.0))
        async with _pair(tls1, tls2) as (_, two, inbox1, _):
            await _send_for(two, 1, _SETTLE_S)
            assert inbox1.messages == []  # node 1 does not trust the new CA yet
            (tmp_path / "n1-ca.pem").write_bytes(old_ca.certificate_pem + new_ca.certificate_pem)
            async with asyncio.timeout(20):
                while not inbox1.messages:
                    two.send(1, [(7, _append(1, 2, b"new CA"))])
                    await asyncio.sleep(0.05)

    asyncio.run(scenario())
