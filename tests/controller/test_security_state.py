"""Users, ACLs, the token key and producer-id owners in the controller's replicated state: what the commands do,
what they refuse, and exact round trips through the command and snapshot encodings."""

from __future__ import annotations

import zlib
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiraft.controller import (
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermission,
    AllocateProducerIds,
    ClusterState,
    ControllerArgumentError,
    CreateAcls,
    DeleteAcls,
    DeleteUser,
    DuplicateUserError,
    PatternType,
    ResourceType,
    ScramCredential,
    SetTokenKey,
    UpsertUser,
    UserNotFoundError,
    apply,
    decode_command,
    decode_snapshot,
    encode_command,
    encode_snapshot,
)
from multiraft.controller.state import Command

CREDENTIAL = ScramCredential(b"s" * 16, 4096, b"a" * 32, b"b" * 32)
READ_EVENTS = AclBinding(
    "User:alice", ResourceType.TOPIC, "events", PatternType.LITERAL, AclOperation.READ, AclPermission.ALLOW
)


def run(*commands: Command) -> ClusterState:
    state = ClusterState()
    for index, command in enumerate(commands, start=1):
        state, result = apply(state, index, command)
        result.unwrap()
    return state


def test_a_user_is_stored_as_its_verifier_and_can_be_replaced_and_deleted() -> None:
    state = run(UpsertUser("alice", CREDENTIAL))
    assert dict(state.security.users) == {"alice": CREDENTIAL}
    other = ScramCredential(b"t" * 16, 8192, b"c" * 32, b"d" * 32)
    assert run(UpsertUser("alice", CREDENTIAL), UpsertUser("alice", other)).security.users["alice"] == other
    assert not run(UpsertUser("alice", CREDENTIAL), DeleteUser("alice")).security.users


def test_creating_an_existing_user_or_deleting_an_unknown_one_fails() -> None:
    with pytest.raises(DuplicateUserError):
        run(UpsertUser("alice", CREDENTIAL), UpsertUser("alice", CREDENTIAL, create_only=True))
    with pytest.raises(UserNotFoundError):
        run(DeleteUser("alice"))


@pytest.mark.parametrize(
    ("command", "field"),
    [
        (UpsertUser("alice", ScramCredential(b"s" * 16, 4095, b"a" * 32, b"b" * 32)), "iterations"),
        (UpsertUser("alice", ScramCredential(b"s" * 4, 4096, b"a" * 32, b"b" * 32)), "salt"),
        (UpsertUser("alice", ScramCredential(b"s" * 16, 4096, b"a" * 31, b"b" * 32)), "stored_key"),
        (UpsertUser("al ice", CREDENTIAL), "name"),
        (UpsertUser("*", CREDENTIAL), "name"),
        (CreateAcls((replace(READ_EVENTS, principal="alice"),)), "principal"),
        (
            CreateAcls(
                (
                    AclBinding(
                        "User:a", ResourceType.CLUSTER, "x", PatternType.LITERAL, AclOperation.ALL, AclPermission.ALLOW
                    ),
                )
            ),
            "resource_name",
        ),
        (SetTokenKey(b"short"), "key"),
    ],
)
def test_malformed_security_commands_fail_naming_the_field(command: Command, field: str) -> None:
    with pytest.raises(ControllerArgumentError) as failed:
        run(command)
    assert failed.value.field == field


def test_acls_are_a_set_and_filters_delete_what_they_match() -> None:
    write = AclBinding(
        "User:bob", ResourceType.TOPIC, "events", PatternType.LITERAL, AclOperation.WRITE, AclPermission.ALLOW
    )
    state = run(CreateAcls((READ_EVENTS, write)), CreateAcls((READ_EVENTS,)))
    assert state.security.acls == (READ_EVENTS, write)
    state = run(CreateAcls((READ_EVENTS, write)), DeleteAcls((AclFilter(principal="User:bob"),)))
    assert state.security.acls == (READ_EVENTS,)


def test_the_first_token_key_stays() -> None:
    state = run(SetTokenKey(b"1" * 32), SetTokenKey(b"2" * 32))
    assert state.security.token_key == b"1" * 32


def test_producer_id_blocks_are_bound_to_the_principal_that_asked() -> None:
    state = run(AllocateProducerIds(10), AllocateProducerIds(5, "User:alice"), AllocateProducerIds(5, "User:bob"))
    owner = state.security.producer_owner
    assert [owner(i) for i in (1, 10, 11, 15, 16, 20, 21)] == [
        None,
        None,
        "User:alice",
        "User:alice",
        "User:bob",
        "User:bob",
        None,
    ]


security_commands = st.one_of(
    st.builds(UpsertUser, st.text(max_size=5), st.just(CREDENTIAL), st.booleans()),
    st.builds(DeleteUser, st.text(max_size=5)),
    st.builds(CreateAcls, st.lists(st.just(READ_EVENTS), max_size=2).map(tuple)),
    st.builds(
        DeleteAcls,
        st.lists(
            st.builds(
                AclFilter,
                st.none() | st.text(max_size=5),
                st.none() | st.sampled_from(list(ResourceType)),
                st.none() | st.text(max_size=3),
                st.none() | st.sampled_from(list(PatternType)),
                st.none() | st.sampled_from(list(AclOperation)),
                st.none() | st.sampled_from(list(AclPermission)),
            ),
            max_size=3,
        ).map(tuple),
    ),
    st.builds(SetTokenKey, st.binary(max_size=40)),
    st.builds(AllocateProducerIds, st.integers(1, 100), st.sampled_from(["", "User:a"])),
)


@given(security_commands)
def test_security_commands_round_trip_through_their_encoding(command: Command) -> None:
    assert decode_command(encode_command(command)) == command


def test_a_snapshot_keeps_the_security_state_and_one_without_it_is_unchanged() -> None:
    state = run(
        UpsertUser("alice", CREDENTIAL),
        CreateAcls((READ_EVENTS,)),
        SetTokenKey(b"k" * 32),
        AllocateProducerIds(3, "User:a"),
    )
    assert decode_snapshot(encode_snapshot(state)) == state
    assert b"security" not in zlib.decompress(encode_snapshot(ClusterState())[9:])
