"""Authentication and ACLs on a real 3-node cluster with SCRAM-SHA-256 and authorization on.

The cluster's first user, ``admin``, comes from ``MULTIRAFT_BOOTSTRAP_USER`` and is a super user; the tests
create the other users and their ACLs through the client and the CLI, as an operator would.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest

from multiraft import AclBinding, AclFilter, Admin, Consumer, Producer, TopicPartition
from multiraft.errors import (
    AuthenticationFailedError,
    AuthorizationFailedError,
    MultiraftError,
    UnknownUserError,
    UserExistsError,
)
from multiraft.tools.launcher import cluster_down, cluster_up
from rpc.client._cluster import ClusterClient
from rpc.proto import multiraft_pb2 as pb
from rpc.proto import multiraft_pb2_grpc as pb_grpc
from rpc.proto.status import from_rpc_error
from storage import encode_batch
from tests.cli._helpers import ok as cli_ok
from tests.cli._helpers import one_error_line, run_cli
from tests.integration._helpers import FAST

pytestmark = pytest.mark.integration

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
TTL_S = 10.0  # the shortest auth_token_ttl_s: the expiry test waits it out once
SECURE = {
    **FAST,
    "authentication": ["scram-sha-256"],
    "authorization": True,
    "super_users": [f"User:{ADMIN}"],
    "auth_token_ttl_s": TTL_S,
}


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The bootstrap addresses of a secure cluster whose admin can authenticate and has made topic ``events``."""
    saved = os.environ.get("MULTIRAFT_BOOTSTRAP_USER")
    os.environ["MULTIRAFT_BOOTSTRAP_USER"] = f"{ADMIN}:{ADMIN_PASSWORD}"  # the nodes inherit it
    try:
        info = cluster_up(tmp_path_factory.mktemp("secure") / "cluster", 3, SECURE)
    finally:
        if saved is None:
            del os.environ["MULTIRAFT_BOOTSTRAP_USER"]
        else:
            os.environ["MULTIRAFT_BOOTSTRAP_USER"] = saved
    try:
        admin = _until_admin_ready(info.bootstrap)
        admin.create_topic("events", partitions=1, replication_factor=3)
        admin.close()
        yield info.bootstrap
    finally:
        cluster_down(info.directory)


def _until_admin_ready(bootstrap: str) -> Admin:
    """The controller leader creates the bootstrap user shortly after the cluster starts."""
    deadline = time.monotonic() + 60
    for _ in range(600):
        admin = Admin(bootstrap, user=ADMIN, password=ADMIN_PASSWORD, request_timeout_s=10)
        try:
            admin.list_users()
            return admin
        except (AuthenticationFailedError, MultiraftError):
            admin.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    raise AssertionError("the bootstrap user never appeared")


@pytest.fixture
def admin(secure: str) -> Iterator[Admin]:
    with Admin(secure, user=ADMIN, password=ADMIN_PASSWORD, request_timeout_s=20) as client:
        yield client


def _key(b: Any) -> tuple[str, ...]:
    """An ACL binding (client or protobuf) as a comparable tuple."""
    return (b.principal, b.resource_type, b.resource_name, b.operation, b.permission, b.pattern_type)


def _everywhere(
    admin: Admin, *, user: str | None = None, gone: str | None = None, acls: Sequence[AclBinding] = ()
) -> None:
    """Until every node has applied the user (or its deletion) and holds the ``acls`` (metadata replicates to
    each node in its own time, as Kafka's ACLs do; a count read from one node may be behind, so the bindings
    themselves are looked for)."""
    client = admin._client
    deadline = time.monotonic() + 20
    for _ in range(400):
        behind = []
        for address in client.metadata(refresh=True).nodes.values():
            stub = pb_grpc.SecurityStub(client.channel(address))
            users = {u.name for u in stub.ListUsers(pb.ListUsersRequest(), timeout=10).users}
            held = {
                (b.principal, b.resource_type, b.resource_name, b.operation, b.permission, b.pattern_type)
                for b in stub.DescribeAcls(pb.DescribeAclsRequest(), timeout=10).bindings
            }
            wanted = {
                (b.principal, b.resource_type, b.resource_name, b.operation, b.permission, b.pattern_type) for b in acls
            }
            if (user is not None and user not in users) or (gone is not None and gone in users) or not wanted <= held:
                behind.append(address)
        if not behind or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not behind, f"nodes {behind} did not apply the change"


def _user(admin: Admin, name: str, bootstrap: str) -> Admin:
    admin.create_user(name, f"{name}-pw", iterations=4096)
    _everywhere(admin, user=name)
    return Admin(bootstrap, user=name, password=f"{name}-pw", request_timeout_s=10)


def _grant(admin: Admin, bindings: list[AclBinding]) -> None:
    admin.create_acls(bindings)
    _everywhere(admin, acls=bindings)


def test_a_client_without_credentials_or_with_a_wrong_password_is_refused_with_the_reason(secure: str) -> None:
    with (
        Admin(secure, request_timeout_s=5) as anonymous,
        pytest.raises(AuthenticationFailedError, match="no credentials"),
    ):
        anonymous.list_topics()
    with (
        Admin(secure, user=ADMIN, password="wrong", request_timeout_s=5) as guesser,
        pytest.raises(AuthenticationFailedError, match="bad SCRAM proof"),
    ):
        guesser.list_topics()
    with (
        Admin(secure, user="nobody", password="x", request_timeout_s=5) as stranger,
        pytest.raises(AuthenticationFailedError, match="unknown user 'nobody'"),
    ):
        stranger.list_topics()
    with Producer(secure, request_timeout_s=5, delivery_timeout_s=5) as producer:
        with pytest.raises(AuthenticationFailedError):
            producer.send("events", b"x").result(timeout=30)


def test_a_principal_is_refused_each_operation_class_until_an_acl_allows_it(admin: Admin, secure: str) -> None:
    alice = _user(admin, "alice", secure)

    def write_once() -> object:
        with Producer(secure, user="alice", password="alice-pw", delivery_timeout_s=10) as producer:
            return producer.send("events", b"v").result(timeout=30)

    def fetch() -> object:
        stub = pb_grpc.LogStub(alice._client.channel(alice._client.addresses()[0]))
        try:
            return stub.Fetch(pb.FetchRequest(topic="events", partition=0, offset=0), timeout=10)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from exc

    with alice:
        assert [t.name for t in alice.list_topics()] == []  # describe: what it may not see is filtered out
        refusals: dict[str, Callable[[], object]] = {
            "write": write_once,
            "read": fetch,
            "describe": lambda: alice.list_offsets("events", "latest"),
            "create": lambda: alice.create_topic("alice-topic", partitions=1, replication_factor=1),
            "alter": lambda: alice.alter_topic_configs("events", set={"retention.ms": "0"}),
            "delete": lambda: alice.delete_topic("events"),
            "cluster-action": lambda: alice.drain_node(3),
            "describe the cluster": alice.describe_cluster,
        }
        for operation, attempt in refusals.items():
            with pytest.raises(AuthorizationFailedError) as refused:
                attempt()
            assert refused.value.metadata["principal"] == "User:alice", operation
        with pytest.raises(AuthorizationFailedError, match="User:alice may not read topic 'events'"):
            fetch()

        _grant(
            admin,
            [
                AclBinding("User:alice", "topic", "events", "write"),
                AclBinding("User:alice", "topic", "events", "read"),
                AclBinding("User:alice", "topic", "alice-", "all", pattern_type="prefixed"),
                AclBinding("User:alice", "group", "alice-group", "read"),
            ],
        )
        write_once()
        assert alice.list_offsets("events", "latest")[0] >= 1
        assert [t.name for t in alice.list_topics()] == ["events"]
        alice.create_topic("alice-topic", partitions=1, replication_factor=1)
        alice.alter_topic_configs("alice-topic", set={"retention.ms": "60000"})
        alice.delete_topic("alice-topic")
        with pytest.raises(AuthorizationFailedError, match="may not cluster-action"):
            alice.drain_node(3)  # still no cluster permission
        with Consumer(secure, user="alice", password="alice-pw", group_id="alice-group") as consumer:
            consumer.assign([TopicPartition("events", 0)], start="earliest")
            records: list[Any] = []
            for _ in range(100):
                records += consumer.poll(timeout_s=0.2)
                if records:
                    break
            assert records and records[0].value == b"v"
            consumer.commit()


def test_a_deny_beats_an_allow_and_a_super_user_needs_no_acl(admin: Admin, secure: str) -> None:
    bob, carol = _user(admin, "bob", secure), _user(admin, "carol", secure)
    _grant(
        admin,
        [
            AclBinding("User:*", "topic", "events", "describe"),
            AclBinding("User:bob", "topic", "events", "describe", permission="deny"),
        ],
    )
    with bob, carol:
        assert [t.name for t in carol.list_topics()] == ["events"]
        assert bob.list_topics() == []
        with pytest.raises(AuthorizationFailedError, match="User:bob may not describe topic 'events'"):
            bob.describe_topic("events")
    # carol sees the topic but may not write it: refused at InitProducer, and batch by batch on the stream
    with Producer(secure, user="carol", password="carol-pw", delivery_timeout_s=30) as idempotent:
        with pytest.raises(AuthorizationFailedError, match="may not write any topic"):
            idempotent.send("events", b"x").result(timeout=30)
    with Producer(secure, user="carol", password="carol-pw", idempotence=False, delivery_timeout_s=10) as plain:
        with pytest.raises(AuthorizationFailedError, match="User:carol may not write topic 'events'"):
            plain.send("events", b"x").result(timeout=30)
    assert "events" in [t.name for t in admin.list_topics()]  # no ACL names the admin


def test_producer_ids_are_bound_to_the_principal_that_obtained_them(admin: Admin, secure: str) -> None:
    dave, erin = _user(admin, "dave", secure), _user(admin, "erin", secure)
    _grant(admin, [AclBinding(f"User:{who}", "topic", "events", "write") for who in ("dave", "erin")])
    with dave, erin:
        init = pb.InitProducerRequest()
        daves_id = dave._client.call_any_log(lambda stub, t: stub.InitProducer(init, timeout=t)).producer_id
        batch = encode_batch([b"x"], timestamps_ms=1, producer_id=daves_id, producer_epoch=0, base_sequence=0)
        request = pb.ProduceRequest(topic="events", partition=0, batch=batch)
        with pytest.raises(AuthorizationFailedError, match=f"User:erin may not use producer id {daves_id}"):
            erin._client.call_leader("events", 0, lambda stub, t: stub.Produce(request, timeout=t))
        dave._client.call_leader("events", 0, lambda stub, t: stub.Produce(request, timeout=t))


def test_an_expired_token_is_refused_and_the_client_renews_its_own(admin: Admin, secure: str) -> None:
    _user(admin, "frank", secure).close()
    _grant(admin, [AclBinding("User:frank", "topic", "events", "describe")])
    with ClusterClient(secure, user="frank", password="frank-pw", request_timeout_s=10) as client:
        assert client.token_source is not None
        token = client.token_source.token()
        stub_call = client._raw_channel(client.addresses()[0]).unary_unary(
            "/multiraft.v1.Admin/ListTopics",
            request_serializer=pb.ListTopicsRequest.SerializeToString,
            response_deserializer=pb.ListTopicsResponse.FromString,
        )
        stub_call(pb.ListTopicsRequest(), metadata=[("authorization", f"Bearer {token}")], timeout=10)
        time.sleep(TTL_S + 0.5)  # bounded: one token lifetime
        with pytest.raises(grpc.RpcError) as expired:
            stub_call(pb.ListTopicsRequest(), metadata=[("authorization", f"Bearer {token}")], timeout=10)
        assert expired.value.code() == grpc.StatusCode.UNAUTHENTICATED  # type: ignore[attr-defined]
        assert "expired token" in from_rpc_error(expired.value).message
        before = client.token_source.authentications
        assert "events" in client.metadata(refresh=True).topics
        assert client.token_source.authentications == before + 1


def test_a_deleted_users_token_stops_working_at_once(admin: Admin, secure: str) -> None:
    grace = _user(admin, "grace", secure)
    with grace:
        grace.list_topics()
        admin.delete_user("grace")
        _everywhere(admin, gone="grace")
        with pytest.raises(AuthenticationFailedError, match="unknown user 'grace'"):
            grace.list_topics()
    with pytest.raises(UnknownUserError):
        admin.delete_user("grace")
    admin.create_user("grace", "pw", iterations=4096)
    with pytest.raises(UserExistsError):
        admin.create_user("grace", "pw2")
    admin.create_user("grace", "pw2", update=True)


def test_the_user_and_acl_commands(secure: str, tmp_path: Path) -> None:
    admin_file, heidi_file = tmp_path / "admin.pw", tmp_path / "heidi.pw"
    admin_file.write_text(ADMIN_PASSWORD + "\n")
    heidi_file.write_text("heidi-pw\n")
    as_admin = {"MULTIRAFT_USER": ADMIN, "MULTIRAFT_PASSWORD_FILE": str(admin_file)}

    def cli(*args: str, env: dict[str, str] = as_admin) -> Any:
        return run_cli(*args, bootstrap=secure, env=env)

    assert "created user 'heidi'" in cli_ok(cli("user", "create", "heidi", "--password-file", str(heidi_file)))
    assert "heidi" in cli_ok(cli("user", "list"))
    admin = Admin(secure, user=ADMIN, password=ADMIN_PASSWORD)
    _everywhere(admin, user="heidi")
    as_heidi = {"MULTIRAFT_USER": "heidi", "MULTIRAFT_PASSWORD_FILE": str(heidi_file)}
    refused = cli("topic", "create", "heidi-t", "--partitions", "1", env=as_heidi)
    assert "AUTHORIZATION_FAILED" in one_error_line(refused)
    added = cli_ok(cli("acl", "add", "--allow-principal", "User:heidi", "--operation", "create", "--topic", "heidi-t"))
    assert "allow User:heidi create topic:literal:heidi-t" in added
    _everywhere(admin, acls=[AclBinding("User:heidi", "topic", "heidi-t", "create")])
    assert "User:heidi" in cli_ok(cli("acl", "list", "--principal", "User:heidi"))
    cli_ok(cli("topic", "create", "heidi-t", "--partitions", "1", "--replication-factor", "1", env=as_heidi))
    removed = cli_ok(
        cli("acl", "remove", "--allow-principal", "User:heidi", "--operation", "create", "--topic", "heidi-t")
    )
    assert "removed: allow User:heidi create" in removed
    assert "User:heidi" not in cli_ok(cli("acl", "list"))
    assert "deleted user 'heidi'" in cli_ok(cli("user", "delete", "heidi"))
    _everywhere(admin, gone="heidi")
    assert "AUTHENTICATION_FAILED" in one_error_line(cli("topic", "list", env=as_heidi))
    with admin:
        assert not admin.describe_acls(AclFilter(principal="User:heidi"))
