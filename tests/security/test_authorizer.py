"""The ACL authorizer follows Kafka's rules: deny wins, literal, wildcard and prefix patterns, User:* matches
everyone, read/write/delete/alter imply describe, super users and authorization off allow everything."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiraft.controller import AclBinding, AclOperation, AclPermission, PatternType, ResourceType
from multiraft.errors import AuthorizationFailedError
from multiraft.security.authorizer import CLUSTER, Authorizer, Resource

ALLOW, DENY = AclPermission.ALLOW, AclPermission.DENY
TOPIC = ResourceType.TOPIC

principals = st.sampled_from(["User:alice", "User:bob", "User:*"])
names = st.text(alphabet="ab*", min_size=1, max_size=3)
bindings = st.builds(
    AclBinding,
    principals,
    st.sampled_from(list(ResourceType)),
    names,
    st.sampled_from(list(PatternType)),
    st.sampled_from(list(AclOperation)),
    st.sampled_from(list(AclPermission)),
)
resources = st.builds(Resource, st.sampled_from(list(ResourceType)), st.text(alphabet="ab", min_size=1, max_size=3))
asked = st.sampled_from(["User:alice", "User:bob"])
operations = st.sampled_from([op for op in AclOperation if op is not AclOperation.ALL])


def acl(
    principal: str,
    name: str,
    operation: AclOperation,
    permission: AclPermission = ALLOW,
    pattern: PatternType = PatternType.LITERAL,
) -> AclBinding:
    return AclBinding(principal, TOPIC, name, pattern, operation, permission)


def matches(binding: AclBinding, principal: str, operation: AclOperation, resource: Resource) -> bool:
    """The matching rule, restated plainly: the oracle of the properties below."""
    if binding.principal not in (principal, "User:*") or binding.resource_type is not resource.type:
        return False
    if binding.pattern_type is PatternType.PREFIXED:
        named = resource.name.startswith(binding.resource_name)
    else:
        named = binding.resource_name in (resource.name, "*")
    return named and binding.operation in (operation, AclOperation.ALL)


@given(st.lists(bindings, max_size=12), asked, operations, resources)
def test_a_matching_deny_always_wins(acls: list[AclBinding], principal: str, op: AclOperation, res: Resource) -> None:
    denied = any(b.permission is DENY and matches(b, principal, op, res) for b in acls)
    allowed = Authorizer(acls).allowed(principal, op, res)
    if denied:
        assert not allowed
    if allowed:
        assert any(b.permission is ALLOW for b in acls)


@given(st.lists(bindings, max_size=12), asked, operations, resources)
def test_without_a_deny_a_matching_allow_is_what_allows(
    acls: list[AclBinding], principal: str, op: AclOperation, res: Resource
) -> None:
    allows = [b for b in acls if b.permission is ALLOW]
    implied = op is AclOperation.DESCRIBE and any(
        matches(b, principal, implying, res)
        for b in allows
        for implying in (AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER)
    )
    expected = any(matches(b, principal, op, res) for b in allows) or implied
    assert Authorizer(allows).allowed(principal, op, res) == expected


@given(st.lists(bindings, max_size=12), asked, st.sampled_from(list(AclOperation)), resources)
def test_super_users_and_authorization_off_allow_everything(
    acls: list[AclBinding], principal: str, op: AclOperation, res: Resource
) -> None:
    assert Authorizer(acls, super_users=[principal]).allowed(principal, op, res)
    assert Authorizer(acls, enabled=False).allowed(principal, op, res)


def test_a_literal_name_matches_only_itself_and_a_prefix_every_name_it_starts() -> None:
    authorizer = Authorizer(
        [
            acl("User:alice", "events", AclOperation.READ),
            acl("User:alice", "logs.", AclOperation.WRITE, pattern=PatternType.PREFIXED),
        ]
    )
    read, write = AclOperation.READ, AclOperation.WRITE
    assert authorizer.allowed("User:alice", read, Resource(TOPIC, "events"))
    assert not authorizer.allowed("User:alice", read, Resource(TOPIC, "events2"))
    assert authorizer.allowed("User:alice", write, Resource(TOPIC, "logs.app"))
    assert not authorizer.allowed("User:alice", write, Resource(TOPIC, "logs"))
    assert not authorizer.allowed("User:bob", read, Resource(TOPIC, "events"))
    assert not authorizer.allowed("User:alice", read, Resource(ResourceType.GROUP, "events"))


def test_a_deny_for_everyone_beats_an_allow_for_one() -> None:
    authorizer = Authorizer(
        [acl("User:alice", "*", AclOperation.ALL), acl("User:*", "secret", AclOperation.READ, DENY)]
    )
    assert authorizer.allowed("User:alice", AclOperation.READ, Resource(TOPIC, "public"))
    assert not authorizer.allowed("User:alice", AclOperation.READ, Resource(TOPIC, "secret"))
    assert authorizer.allowed("User:alice", AclOperation.WRITE, Resource(TOPIC, "secret"))


def test_a_refusal_names_the_principal_the_operation_and_the_resource() -> None:
    with pytest.raises(AuthorizationFailedError) as refused:
        Authorizer([]).check("User:bob", AclOperation.CLUSTER_ACTION, CLUSTER)
    assert str(refused.value) == "User:bob may not cluster-action cluster 'multiraft-cluster'"
    assert refused.value.metadata == {
        "principal": "User:bob",
        "operation": "cluster-action",
        "resource_type": "cluster",
        "resource_name": "multiraft-cluster",
    }


def test_init_producer_needs_write_on_some_topic() -> None:
    authorizer = Authorizer([acl("User:alice", "events", AclOperation.WRITE), acl("User:bob", "x", AclOperation.READ)])
    assert authorizer.allowed_somewhere("User:alice", AclOperation.WRITE, TOPIC)
    assert not authorizer.allowed_somewhere("User:bob", AclOperation.WRITE, TOPIC)
