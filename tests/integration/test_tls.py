"""A cluster started with TLS (``cluster up --secure``): clients reach it only over TLS with its CA, a node
with a certificate of another CA cannot join, and certificates rotated under a running producer are served to
new connections without a restart and without losing a record."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509

from multiraft import Admin, AuthenticationFailedError, Consumer, Producer, TlsSettings, TopicPartition
from multiraft.errors import ConnectionFailedError
from multiraft.security.tls import make_ca, make_node_certificate, node_name, write_cluster_certificates, write_key_pair
from multiraft.tools.launcher import ClusterInfo, add_node, cluster_down, cluster_up, stop_node
from tests.cli._helpers import ok, one_error_line, run_cli
from tests.integration._helpers import FAST

pytestmark = pytest.mark.integration

_RELOAD_S = 0.2


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterInfo]:
    settings = {**FAST, "tls_reload_interval_s": _RELOAD_S}
    info = cluster_up(tmp_path_factory.mktemp("secure") / "cluster", 3, settings, secure=True)
    try:
        yield info
    finally:
        cluster_down(info.directory)


def _client_tls(info: ClusterInfo) -> TlsSettings:
    return TlsSettings(ca_file=info.tls["ca_file"], cert_file=info.tls["cert_file"], key_file=info.tls["key_file"])


def _consume_all(info: ClusterInfo, topic: str, partitions: int, count: int) -> list[bytes]:
    consumer = Consumer(info.bootstrap, tls=TlsSettings(ca_file=info.tls["ca_file"]))
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)], start="earliest")
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        for _ in range(10_000):
            if len(values) >= count or time.monotonic() > deadline:
                break
            values += [record.value for record in consumer.poll(0.5) if record.value is not None]
        return values
    finally:
        consumer.close()


def test_a_plaintext_client_to_the_tls_port_gets_a_clear_error(secure_cluster: ClusterInfo) -> None:
    with Admin(secure_cluster.bootstrap, connect_timeout_s=3) as admin, pytest.raises(ConnectionFailedError) as caught:
        admin.list_topics()
    assert "may require TLS" in caught.value.message
    assert "--tls-ca" in caught.value.message


def test_a_client_trusting_another_ca_is_refused(secure_cluster: ClusterInfo, tmp_path: Path) -> None:
    other_ca = tmp_path / "other-ca.pem"
    other_ca.write_bytes(make_ca("not the cluster's CA").certificate_pem)
    tls = TlsSettings(ca_file=str(other_ca))
    with Admin(secure_cluster.bootstrap, connect_timeout_s=3, tls=tls) as admin:
        with pytest.raises(ConnectionFailedError) as caught:
            admin.list_topics()
    assert "TLS handshake failed" in caught.value.message


def test_a_tls_client_with_the_cluster_ca_produces_and_consumes(secure_cluster: ClusterInfo) -> None:
    tls = _client_tls(secure_cluster)
    with Admin(secure_cluster.bootstrap, tls=tls) as admin:
        admin.create_topic("secure", partitions=3, replication_factor=3)
    with Producer(secure_cluster.bootstrap, tls=tls) as producer:
        for i in range(300):
            producer.send("secure", b"record-%d" % i, key=b"%d" % i)
        producer.flush()
    assert sorted(_consume_all(secure_cluster, "secure", 3, 300)) == sorted(b"record-%d" % i for i in range(300))


def test_a_node_with_a_certificate_of_another_ca_cannot_join(secure_cluster: ClusterInfo) -> None:
    tls_dir = Path(secure_cluster.tls["directory"])
    new_id = max(secure_cluster.nodes) + 1
    # Its certificate names it and the loopback, but another CA signed it; it trusts the cluster's CA.
    intruder = make_node_certificate(make_ca("an intruder's CA"), new_id)
    write_key_pair(intruder, tls_dir / f"{node_name(new_id)}.pem", tls_dir / f"{node_name(new_id)}-key.pem")
    add_node(secure_cluster, new_id, wait=False)
    try:
        with Admin(secure_cluster.bootstrap, tls=_client_tls(secure_cluster)) as admin:
            deadline = time.monotonic() + 10  # a real node registers within a second or two here
            for _ in range(1000):
                assert new_id not in {node.node_id for node in admin.describe_cluster().nodes}
                if time.monotonic() > deadline:
                    break
                time.sleep(0.2)
    finally:
        stop_node(secure_cluster, new_id)
        del secure_cluster.nodes[new_id]
        secure_cluster.save()


def _served_serial(address: str, context: ssl.SSLContext, server_name: str) -> int:
    host, _, port = address.rpartition(":")
    with (
        socket.create_connection((host, int(port)), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=server_name) as wrapped,
    ):
        der = wrapped.getpeercert(binary_form=True)
    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)


def test_rotating_every_certificate_while_producing_loses_nothing(secure_cluster: ClusterInfo) -> None:
    tls = _client_tls(secure_cluster)
    with Admin(secure_cluster.bootstrap, tls=tls) as admin:
        admin.create_topic("rotation", partitions=3, replication_factor=3)
    probe = ssl.create_default_context(cafile=secure_cluster.tls["ca_file"])
    probe.load_cert_chain(secure_cluster.tls["cert_file"], secure_cluster.tls["key_file"])
    node = secure_cluster.nodes[1]
    before = _served_serial(node.client_address, probe, "127.0.0.1")
    stop = threading.Event()
    sent: list[bytes] = []

    def produce() -> None:
        with Producer(secure_cluster.bootstrap, tls=tls, linger_ms=1) as producer:
            for i in range(100_000):
                if stop.is_set():
                    break
                value = b"before-and-during-%d" % i
                producer.send("rotation", value).result(timeout=30)
                sent.append(value)

    writer = threading.Thread(target=produce)
    writer.start()
    try:
        for _ in range(200):  # some records go before the rotation
            if len(sent) >= 50:
                break
            time.sleep(0.05)
        write_cluster_certificates(Path(secure_cluster.tls["directory"]), sorted(secure_cluster.nodes), clients=())
        rotated = (Path(secure_cluster.tls["directory"]) / f"{node_name(1)}.pem").read_bytes()
        after = int(x509.load_pem_x509_certificate(rotated).serial_number)
        assert after != before
        served = {"client": before, "peer": before}
        deadline = time.monotonic() + 30
        for _ in range(1000):  # new connections to both ports get the new certificate
            served = {
                "client": _served_serial(node.client_address, probe, "127.0.0.1"),
                "peer": _served_serial(node.peer_address, probe, node_name(1)),
            }
            if set(served.values()) == {after} or time.monotonic() > deadline:
                break
            time.sleep(_RELOAD_S)
        assert served == {"client": after, "peer": after}
    finally:
        stop.set()
        writer.join(timeout=60)
    assert not writer.is_alive()
    # A new producer connects with the new certificates and writes after the rotation.
    with Producer(secure_cluster.bootstrap, tls=tls) as producer:
        for i in range(50):
            producer.send("rotation", b"after-%d" % i)
            sent.append(b"after-%d" % i)
        producer.flush()
    assert len(sent) > 100
    assert sorted(_consume_all(secure_cluster, "rotation", 3, len(sent))) == sorted(sent)


def test_the_cli_reaches_a_tls_cluster_with_the_tls_variables_or_its_cluster_dir(secure_cluster: ClusterInfo) -> None:
    tls = secure_cluster.tls
    variables = {"MULTIRAFT_TLS_CA": tls["ca_file"], "MULTIRAFT_TLS_CERT": tls["cert_file"]}
    variables["MULTIRAFT_TLS_KEY"] = tls["key_file"]
    bootstrap = secure_cluster.bootstrap
    ok(run_cli("topic", "create", "cli-secure", "-p", "1", "-r", "3", bootstrap=bootstrap, env=variables))
    ok(run_cli("produce", "cli-secure", bootstrap=bootstrap, stdin=b"one\ntwo\n", env=variables))
    flags = ["--tls-ca", tls["ca_file"]]
    assert ok(run_cli("consume", "cli-secure", *flags, bootstrap=bootstrap)) == "one\ntwo\n"
    # A --secure cluster's directory brings its own certificates.
    listed = ok(run_cli("topic", "list", "--cluster-dir", secure_cluster.directory))
    assert "cli-secure" in listed
    # Without TLS the error says what is missing.
    error = one_error_line(run_cli("topic", "list", "--timeout", "3", bootstrap=bootstrap))
    assert "may require TLS" in error and "--tls-ca" in error


def test_cluster_up_secure_runs_authentication_acls_and_encrypted_gossip_and_its_directory_brings_the_admin(
    tmp_path: Path,
) -> None:
    info = cluster_up(tmp_path / "cluster", 3, FAST, secure=True, auth=True)
    try:
        tls = info.tls
        assert oct(Path(tls["password_file"]).stat().st_mode & 0o777) == "0o600"
        assert all("gossip_keyring_file" in n.config_path.read_text() for n in info.nodes.values())
        # The admin the nodes made from MULTIRAFT_BOOTSTRAP_USER: the cluster directory brings it to the CLI.
        for _ in range(100):  # bounded: the controller leader creates the user shortly after it is elected
            created = run_cli("topic", "create", "audited", "-p", "1", "-r", "3", "--cluster-dir", info.directory)
            if created.returncode == 0:
                break
            time.sleep(0.2)
        ok(created)
        assert "audited" in ok(run_cli("topic", "list", "--cluster-dir", info.directory))
        # TLS alone is not enough: an anonymous client is refused, and says why.
        with Admin(info.bootstrap, tls=TlsSettings(ca_file=tls["ca_file"]), request_timeout_s=5) as anonymous:
            with pytest.raises(AuthenticationFailedError, match="no credentials"):
                anonymous.list_topics()
    finally:
        cluster_down(info.directory)
