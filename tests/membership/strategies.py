"""Hypothesis strategies for member metadata and wire messages."""

from __future__ import annotations

from hypothesis import strategies as st

from membership import MemberMeta, MemberState
from membership._wire import Ack, Alive, Dead, IndirectPing, Message, Nack, Ping, PushPull, StateEntry, Suspect

U32 = st.integers(0, 2**32 - 1)
NODE_ID = st.integers(1, 2**64 - 1)
SMALL_NODE_ID = st.integers(1, 6)

_host = st.one_of(
    st.from_regex(r"\A[a-z][a-z0-9.-]{0,30}\Z"),
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(lambda ip: f"[{ip}]"),
)
ADDRESS = st.builds(lambda host, port: f"{host}:{port}", _host, st.integers(1, 65535))
RACK = st.text(max_size=40)
HOST = st.one_of(st.just(""), st.text(min_size=1, max_size=16))
CAPACITY = st.floats(min_value=1e-6, max_value=1e6, allow_nan=False, allow_infinity=False)


def metas(node_ids: st.SearchStrategy[int] = NODE_ID) -> st.SearchStrategy[MemberMeta]:
    return st.builds(MemberMeta, node_ids, ADDRESS, ADDRESS, RACK, CAPACITY, HOST)


def alives(node_ids: st.SearchStrategy[int] = NODE_ID) -> st.SearchStrategy[Alive]:
    return st.builds(Alive, U32, metas(node_ids), ADDRESS)


def messages(node_ids: st.SearchStrategy[int] = NODE_ID) -> st.SearchStrategy[Message]:
    return st.one_of(
        st.builds(Ping, U32, node_ids),
        st.builds(IndirectPing, U32, node_ids, ADDRESS, st.booleans()),
        st.builds(Ack, U32),
        st.builds(Nack, U32),
        st.builds(Suspect, U32, node_ids, node_ids),
        st.builds(Dead, U32, node_ids, node_ids),
        alives(node_ids),
    )


def push_pulls() -> st.SearchStrategy[PushPull]:
    entry = st.builds(StateEntry, U32, metas(), ADDRESS, st.sampled_from(MemberState))
    return st.builds(PushPull, U32, NODE_ID, st.booleans(), st.lists(entry, max_size=8).map(tuple))
