"""The node's security service over a fake cluster view: a SCRAM exchange ends in a token every node accepts,
a deleted user's token is refused by a node that applied the deletion but not by one still behind the token,
sessions are single-use, and the authorizer follows the applied ACLs."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace

import pytest

from multiraft import controller as ctl
from multiraft.errors import AuthenticationFailedError
from multiraft.node.services.security import NodeSecurity, SecuritySettings
from multiraft.security.authorizer import Resource
from multiraft.security.scram import ScramClient, scram_credential

KEY = b"k" * 32


def _state(*users: str, applied_index: int = 10) -> ctl.ClusterState:
    credentials = {name: ctl.ScramCredential(*scram_credential(f"{name}-pw", iterations=4096)) for name in users}
    return ctl.ClusterState(applied_index=applied_index, security=ctl.SecurityState(users=credentials, token_key=KEY))


@dataclass
class View:
    cluster: ctl.ClusterState = field(default_factory=lambda: _state("alice"))
    node_id: int = 1
    controller_leader: int = 1


class NoController:
    async def call(self, body: object, *, timeout_s: float = 0) -> object:
        raise AssertionError("no controller call expected")


def _service(view: View, **settings: object) -> NodeSecurity:
    defaults: dict[str, object] = {"authentication": ("scram-sha-256",), "authorization": True}
    return NodeSecurity(SecuritySettings(**{**defaults, **settings}), view, NoController())  # type: ignore[arg-type]


def _authenticate(service: NodeSecurity, user: str, password: str) -> str:
    client = ScramClient(user, password)
    session, server_first = service.scram_first(client.first())
    server_final, token, _, _ = service.scram_final(session, client.final(server_first))
    client.verify(server_final)
    return token


def test_a_scram_exchange_ends_in_a_token_another_node_accepts() -> None:
    view = View()
    token = _authenticate(_service(view), "alice", "alice-pw")
    assert _service(View(cluster=view.cluster)).token_principal(token) == "User:alice"


def test_a_session_serves_one_exchange_only() -> None:
    service = _service(View())
    client = ScramClient("alice", "alice-pw")
    session, server_first = service.scram_first(client.first())
    final = client.final(server_first)
    service.scram_final(session, final)
    with pytest.raises(AuthenticationFailedError, match="unknown or expired SCRAM session"):
        service.scram_final(session, final)


def test_a_deleted_users_token_is_refused_only_where_the_deletion_is_applied() -> None:
    token = _authenticate(_service(View(cluster=_state("alice", applied_index=10))), "alice", "alice-pw")
    behind = View(cluster=_state(applied_index=9))  # has not applied alice's creation yet
    assert _service(behind).token_principal(token) == "User:alice"
    deleted = View(cluster=_state(applied_index=11))
    with pytest.raises(AuthenticationFailedError, match="unknown user 'alice'"):
        _service(deleted).token_principal(token)


def test_scram_is_refused_when_the_cluster_does_not_enable_it() -> None:
    with pytest.raises(AuthenticationFailedError, match="not enabled"):
        _service(View(), authentication=("mtls",)).scram_first("n,,n=alice,r=abc")


def test_the_authorizer_follows_the_applied_acls() -> None:
    view = View()
    service = _service(view)
    topic = Resource(ctl.ResourceType.TOPIC, "events")
    assert not service.authorizer().allowed("User:alice", ctl.AclOperation.READ, topic)
    binding = ctl.AclBinding(
        "User:alice",
        ctl.ResourceType.TOPIC,
        "events",
        ctl.PatternType.LITERAL,
        ctl.AclOperation.READ,
        ctl.AclPermission.ALLOW,
    )
    view.cluster = replace(view.cluster, security=replace(view.cluster.security, acls=(binding,)))
    assert service.authorizer().allowed("User:alice", ctl.AclOperation.READ, topic)


def test_the_token_key_and_the_bootstrap_user_are_set_by_the_controller_leader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MULTIRAFT_BOOTSTRAP_USER", "admin:admin-pw")
    monkeypatch.setattr("multiraft.node.services.security._KEY_CHECK_S", 0)
    view = View(cluster=ctl.ClusterState())
    proposed: list[object] = []

    class Controller:
        async def call(self, body: object, *, timeout_s: float = 0) -> object:
            proposed.append(body)
            view.cluster, _ = ctl.apply(view.cluster, view.cluster.applied_index + 1, body)  # type: ignore[arg-type]
            return None

    service = NodeSecurity(SecuritySettings(("scram-sha-256",)), view, Controller())  # type: ignore[arg-type]

    async def run() -> None:
        task = asyncio.ensure_future(service.keep_token_key())
        for _ in range(100):
            await asyncio.sleep(0)
            if len(proposed) >= 2:
                break
        task.cancel()

    asyncio.run(run())
    assert [type(p) for p in proposed] == [ctl.SetTokenKey, ctl.UpsertUser]
    assert len(view.cluster.security.token_key) == 32 and "admin" in view.cluster.security.users
