"""Stage tracing (multiraft.trace): lines in a per-process file while MULTIRAFT_TRACE names a directory, nothing
otherwise; the node's hooks name each batch so that lines from every process can be joined."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from multiraft import raft, trace
from multiraft.node.replicas.partition import PartitionView
from multiraft.node.scheduler.tracing import trace_peer_messages, trace_persisted
from storage.batch import encode_batch, read_header


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[Path]:
    before = os.environ.get(trace.ENV)
    trace.configure(tmp_path, "test")
    try:
        yield tmp_path
    finally:
        trace.configure(before)


def lines_of(directory: Path) -> list[list[str]]:
    trace.close()
    return [line.split() for path in sorted(directory.glob("*.trace")) for line in path.read_text().splitlines()]


def test_nothing_is_written_while_tracing_is_off(tmp_path: Path) -> None:
    before = os.environ.get(trace.ENV)
    trace.configure(None)
    try:
        trace.event("leader_received", "c1")
        trace.upto("pushed", "t", 0, 5)
        assert not trace.ON and trace.ENV not in os.environ
        assert list(tmp_path.iterdir()) == []
    finally:
        trace.configure(before)


def test_each_line_holds_a_monotonic_time_the_stage_and_its_keys_in_a_file_named_for_the_process(
    traced: Path,
) -> None:
    assert trace.ON and os.environ[trace.ENV] == str(traced)  # processes started from here trace too
    trace.event("proposed", trace.batch_key(encode_batch([b"v"], timestamps_ms=0)), trace.entry_key(3, 17))
    trace.upto("pushed", "orders", 2, 40)
    trace.entries_upto("ack_received", 3, 17)
    [(path)] = traced.glob("*.trace")
    assert path.name == f"test-{os.getpid()}.trace"
    first, second, third = lines_of(traced)
    assert first[1] == "proposed" and first[3] == "g3.17"
    assert int(first[0]) <= int(second[0]) <= int(third[0])
    assert second[1:] == ["pushed", "uorders/2@40"]
    assert third[1:] == ["ack_received", "ug3@18"]


def test_a_batch_keeps_its_key_when_the_leader_writes_its_base_offset() -> None:
    batch = bytearray(encode_batch([b"a", b"b"], timestamps_ms=0))
    key = trace.batch_key(bytes(batch))
    assert key == f"c{read_header(bytes(batch)).crc}"
    batch[0:8] = (1234).to_bytes(8, "little")
    assert trace.batch_key(bytes(batch)) == key


def _entry(index: int, kind: raft.EntryKind = raft.EntryKind.DATA) -> raft.Entry:
    return raft.Entry(index=index, term=1, kind=kind, timestamp_ms=0, payload=b"")


def test_the_node_hooks_name_entries_appended_acknowledged_and_made_durable(traced: Path) -> None:
    append = raft.Message(
        type=raft.MessageType.APP, to=2, sender=1, entries=[_entry(5), _entry(6, raft.EntryKind.NOOP)]
    )
    ack = raft.Message(type=raft.MessageType.APP_RESP, to=1, sender=2, index=6)
    refused = raft.Message(type=raft.MessageType.APP_RESP, to=1, sender=3, index=6, reject=True)
    trace_peer_messages([(9, append), (9, ack), (9, refused)])
    leader = SimpleNamespace(group_id=9, is_leader=True)
    follower = SimpleNamespace(group_id=4, is_leader=False)
    trace_persisted([(leader, SimpleNamespace(entries=[_entry(7)])), (follower, SimpleNamespace(entries=[_entry(2)]))])
    assert [line[1:] for line in lines_of(traced)] == [
        ["append_received", "g9.5"],  # the no-op is no one's batch
        ["ack_received", "ug9@7"],
        ["leader_persisted", "g9.7"],
        ["follower_persisted", "g4.2"],
    ]


def test_a_leaders_view_traces_each_new_high_watermark_and_a_followers_does_not(traced: Path) -> None:
    async def publish() -> None:
        view = PartitionView("orders", 1, 9, None)  # type: ignore[arg-type]  # the view only holds its log
        common = {"log_start_offset": 0, "leader_id": 1, "term": 1, "current": True}
        view.update(high_watermark=10, leader=True, **common)  # type: ignore[arg-type]
        view.update(high_watermark=10, leader=True, **common)  # type: ignore[arg-type]  # unchanged
        view.update(high_watermark=12, leader=False, **common)  # type: ignore[arg-type]

    asyncio.run(publish())
    assert [line[1:] for line in lines_of(traced)] == [["hw_visible", "uorders/1@10"]]
