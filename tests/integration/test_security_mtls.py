"""Mutual-TLS principals on a real TLS cluster (``cluster up --secure``): a client certificate's common name is
its principal, ACLs apply to it, and the ``admin`` certificate's principal is a super user."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from multiraft import AclBinding, Admin, TlsSettings
from multiraft.errors import AuthorizationFailedError
from multiraft.security.tls import write_cluster_certificates
from multiraft.tools.launcher import ClusterInfo, cluster_down, cluster_up
from tests.integration._helpers import FAST

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def mtls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterInfo]:
    settings = {
        **FAST,
        "tls_client_auth": "required",
        "authentication": ["mtls"],
        "authorization": True,
        "super_users": ["User:admin"],
    }
    info = cluster_up(tmp_path_factory.mktemp("mtls") / "cluster", 3, settings, secure=True)
    try:
        yield info
    finally:
        cluster_down(info.directory)


def _tls(info: ClusterInfo, client: str) -> TlsSettings:
    directory = Path(info.tls["ca_file"]).parent
    if not (directory / f"{client}.pem").exists():
        write_cluster_certificates(directory, [], clients=(client,))  # signed by the cluster's CA
    cert, key = directory / f"{client}.pem", directory / f"{client}-key.pem"
    return TlsSettings(ca_file=info.tls["ca_file"], cert_file=str(cert), key_file=str(key))


def test_a_client_certificate_is_its_principal_and_acls_apply_to_it(mtls_cluster: ClusterInfo) -> None:
    with Admin(mtls_cluster.bootstrap, tls=_tls(mtls_cluster, "admin")) as admin:
        admin.create_topic("mtls-topic", partitions=1, replication_factor=3)  # User:admin is a super user
        with Admin(mtls_cluster.bootstrap, tls=_tls(mtls_cluster, "ivan"), request_timeout_s=10) as ivan:
            assert ivan.list_topics() == []
            with pytest.raises(AuthorizationFailedError, match="User:ivan may not create topic 'ivan-topic'"):
                ivan.create_topic("ivan-topic", partitions=1, replication_factor=1)
            admin.create_acls([AclBinding("User:ivan", "topic", "mtls-topic", "describe")])
            deadline = time.monotonic() + 20
            for _ in range(400):  # until the node ivan asks has applied the ACL
                if [t.name for t in ivan.list_topics()] == ["mtls-topic"] or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert [t.name for t in ivan.list_topics()] == ["mtls-topic"]
