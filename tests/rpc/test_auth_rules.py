"""Every RPC of the protocol says which ACL it needs (a new RPC cannot be added unguarded), and the bearer
token is read from the ``authorization`` metadata as HTTP's ``Bearer`` scheme."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from multiraft.config.node import NodeConfig
from multiraft.controller import AclBinding, AclOperation, AclPermission, PatternType, ResourceType
from multiraft.errors import AuthenticationFailedError
from multiraft.security.authorizer import Authorizer
from rpc.proto import multiraft_pb2 as pb
from rpc.server.auth import _RULES, AUTHENTICATE_METHOD, ClientAuth, bearer_token


def test_every_rpc_but_authenticate_has_an_acl_rule() -> None:
    methods = {
        f"/{service.full_name}/{method.name}"
        for service in pb.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    }
    assert methods - {AUTHENTICATE_METHOD} == set(_RULES)


def test_the_bearer_token_is_read_case_insensitively_and_other_schemes_are_refused() -> None:
    assert bearer_token([("x-other", "1"), ("authorization", "Bearer abc.def")]) == "abc.def"
    assert bearer_token([("authorization", b"bearer  tok ")]) == "tok"
    assert bearer_token([("x-other", "1")]) is None
    assert bearer_token(None) is None
    with pytest.raises(AuthenticationFailedError, match="Bearer"):
        bearer_token([("authorization", "Basic dXNlcjpwdw==")])


@pytest.mark.parametrize(
    ("method", "request_", "needs"),
    [
        ("JoinGroup", pb.JoinGroupRequest(group="billing"), [("READ", "billing")]),
        ("SyncGroup", pb.SyncGroupRequest(group="billing"), [("READ", "billing")]),
        ("Heartbeat", pb.GroupHeartbeatRequest(group="billing"), [("READ", "billing")]),
        ("LeaveGroup", pb.LeaveGroupRequest(group="billing"), [("READ", "billing")]),
        ("DescribeGroups", pb.DescribeGroupsRequest(groups=["a", "b"]), [("DESCRIBE", "a"), ("DESCRIBE", "b")]),
        ("DeleteGroups", pb.DeleteGroupsRequest(groups=["a"]), [("DELETE", "a")]),
    ],
)
def test_group_calls_need_their_acl_on_each_group(method: str, request_: object, needs: list[tuple[str, str]]) -> None:
    rule = _RULES[f"/multiraft.v1.Groups/{method}"]
    asked = [alternatives[0] for alternatives in rule(request_)]
    assert [(operation.name, resource.name) for operation, resource in asked] == needs
    assert all(resource.type.name == "GROUP" for _, resource in asked)


def test_list_groups_shows_only_the_groups_and_listings_the_principal_may_describe() -> None:
    alice_reads_billing = AclBinding(
        "User:alice", ResourceType.GROUP, "billing", PatternType.LITERAL, AclOperation.READ, AclPermission.ALLOW
    )
    security = SimpleNamespace(
        settings=SimpleNamespace(authorization=True), authorizer=lambda: Authorizer([alice_reads_billing])
    )
    auth = ClientAuth(NodeConfig(authorization=True))
    auth.attach(security)  # type: ignore[arg-type]
    response = pb.ListGroupsResponse(
        groups=["audit", "billing"],
        listings=[pb.GroupListing(group="audit", state="Empty"), pb.GroupListing(group="billing", state="Stable")],
    )
    shown = auth.filter("/multiraft.v1.Admin/ListGroups", "User:alice", response)
    assert list(shown.groups) == ["billing"] and [x.group for x in shown.listings] == ["billing"]
