"""Fuzzing the peer protocol of a real 3-node cluster from a raw TCP socket.

A stranger (node 99, right cluster id and protocol version) says HELLO to a node's peer port, then sends
random and mutated frames of every kind: RAFT frames (messages from itself and forged for real nodes, huge
terms, flipped bytes, cut short), HEARTBEATS frames, REQUESTs of every kind with random, mutated, truncated
and wrong-kind bodies, RESPONSEs to calls nobody made, unknown frame types and lying lengths. The node may
close the connection (the fuzzer dials again); it must never stop: after each batch every node's process is
alive, the cluster produces and fetches through the client, and the records produced before are intact. At
the end every partition has a leader and the replicas hold the same entries, byte for byte.

The loop is seeded (replayable) and bounded in frames and time.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import struct
import time
from collections import Counter
from pathlib import Path

import pytest

from multiraft import consumer_groups as g
from multiraft import raft
from multiraft.node.peer import consumer_group_messages as pg
from multiraft.node.peer import messages as pm
from multiraft.node.peer.transport import PROTOCOL_VERSION, FrameType
from multiraft.node.vocabulary.catchup import SegmentChunkRequest
from multiraft.node.vocabulary.consumer_groups import (
    GroupDelete,
    GroupDescribe,
    GroupHeartbeat,
    GroupJoin,
    GroupLeave,
    GroupsList,
    GroupsRequest,
    GroupSync,
)
from multiraft.node.vocabulary.controller import ControllerRequest, CreateTopicRequest
from multiraft.node.vocabulary.offsets import OffsetRow, OffsetsCommit, OffsetsFetch, OffsetsList, OffsetsRequest
from multiraft.node.vocabulary.status import LeaderAnnouncement
from multiraft.tools.launcher import ClusterInfo, cluster_down
from tests.integration._helpers import Cluster, assert_replicas_identical, fetch_all, produce, wait_settled

pytestmark = pytest.mark.integration

TOPIC = "peer-fuzzed"
PARTITIONS = 2
SEED = 20261124
BATCHES = 6
FRAMES_PER_BATCH = 60
MAX_SECONDS = 40.0  # the fuzzing loop's own budget; checks after each batch are extra
STRANGER = 99
CLUSTER_ID = "multiraft"

_FRAME_HEAD = struct.Struct("<IB")
_CALL_HEAD = struct.Struct("<QB")
_HEARTBEAT = struct.Struct("<IBQQ")
_TOP = 2**63 - 2


def _frame(frame_type: int, body: bytes) -> bytes:
    return _FRAME_HEAD.pack(len(body) + 1, frame_type) + body


def _hello(node_id: int, cluster_id: str) -> bytes:
    cluster = cluster_id.encode()
    return _frame(FrameType.HELLO, struct.pack("<HQH", PROTOCOL_VERSION, node_id, len(cluster)) + cluster)


def _mutate(rng: random.Random, data: bytes) -> bytes:
    """Flip bits, overwrite a 64-bit field with an extreme value, cut short, extend or splice."""
    if not data:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16)))
    how = rng.choice(["flip", "flips", "field", "truncate", "extend", "splice"])
    buffer = bytearray(data)
    if how == "flip":
        buffer[rng.randrange(len(buffer))] ^= 1 << rng.randrange(8)
    elif how == "flips":
        for _ in range(rng.randrange(2, 9)):
            buffer[rng.randrange(len(buffer))] = rng.randrange(256)
    elif how == "field" and len(buffer) >= 8:
        at = rng.randrange(len(buffer) - 7)
        value = rng.choice([0, 1, 2**31, 2**32 - 1, _TOP, _TOP + 1, 2**63, 2**64 - 1, rng.randrange(2**64)])
        buffer[at : at + 8] = value.to_bytes(8, "little")
    elif how == "truncate":
        del buffer[rng.randrange(len(buffer)) :]
    elif how == "extend":
        buffer += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 32)))
    else:
        at = rng.randrange(len(buffer))
        buffer[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16)))
    return bytes(buffer)


def _number(rng: random.Random) -> int:
    return rng.choice([0, 1, 2, 3, rng.randrange(1 << 16), _TOP, _TOP + 1, 2**64 - 1, rng.randrange(2**64)])


def _group(rng: random.Random) -> int:
    return rng.choice([rng.randrange(12), rng.randrange(12), rng.randrange(2**32)])  # real groups are small ids


def _raft_message(rng: random.Random, to: int) -> raft.Message:
    sender = STRANGER if rng.random() < 0.6 else rng.choice([1, 2, 3, to])  # some forged for real nodes
    mtype = rng.choice(list(raft.MessageType))
    entries = [
        raft.Entry(_number(rng), _number(rng), rng.choice(list(raft.EntryKind)), rng.randrange(2**40), rng.randbytes(8))
        for _ in range(rng.choice([0, 0, 1, 3]))
    ]
    snapshot = None
    if mtype is raft.MessageType.SNAP and rng.random() < 0.5:
        conf = raft.ConfState.of([1, 2, 3, STRANGER])
        snapshot = raft.Snapshot(raft.SnapshotMeta(_number(rng), _number(rng), conf), rng.randbytes(16))
    return raft.Message(
        type=mtype,
        to=to,
        sender=sender,
        term=_number(rng),
        log_term=_number(rng),
        index=_number(rng),
        commit=_number(rng),
        entries=entries,
        reject=rng.random() < 0.2,
        reject_hint=_number(rng) if rng.random() < 0.3 else 0,
        snapshot=snapshot,
        context=rng.randbytes(rng.choice([0, 0, 8])),
        quiesce=rng.random() < 0.2,
        leader_transfer=rng.random() < 0.1,
    )


def _raft_frame(rng: random.Random, to: int) -> bytes:
    body = b""
    for _ in range(rng.randrange(1, 4)):
        encoded = raft.encode_message(_raft_message(rng, to))
        if rng.random() < 0.5:
            encoded = _mutate(rng, encoded)
        body += struct.pack("<II", _group(rng), len(encoded)) + encoded
    if rng.random() < 0.2:
        body = _mutate(rng, body)  # lying group headers and lengths
    return _frame(FrameType.RAFT, body)


def _heartbeats_frame(rng: random.Random) -> bytes:
    body = b"".join(
        _HEARTBEAT.pack(_group(rng), rng.choice([0, 1, 2, 3, 3, rng.randrange(256)]), _number(rng), _number(rng))
        for _ in range(rng.randrange(1, 8))
    )
    if rng.random() < 0.3:
        body = _mutate(rng, body)
    return _frame(FrameType.HEARTBEATS, body)


def _valid_bodies(rng: random.Random) -> dict[int, bytes]:
    """A well-formed body of each request kind (sent as its own kind, mutated, or as another kind)."""
    return {
        pm.RequestKind.CONTROLLER: pm.encode_controller_request(
            ControllerRequest(
                rng.choice(
                    [
                        CreateTopicRequest(f"fz-{rng.randrange(4)}", rng.randrange(-1, 3), rng.randrange(-1, 4)),
                        CreateTopicRequest(TOPIC, 1, 3, {"retention.ms": "1"}),
                    ]
                ),
                forwarded=rng.random() < 0.5,
            )
        ),
        pm.RequestKind.PARTITION_STATUS: pm.encode_group_ids([_group(rng) for _ in range(rng.randrange(4))]),
        pm.RequestKind.LEADERS: pm.encode_leaders(
            [LeaderAnnouncement(_group(rng), rng.choice([1, 2, 3, STRANGER]), rng.randrange(1 << 20))]
        ),
        pm.RequestKind.OFFSETS: pm.encode_offsets_request(
            OffsetsRequest(
                _group(rng),
                rng.choice(
                    [
                        OffsetsFetch("g", ((TOPIC, 0),)),
                        OffsetsFetch("g", None),
                        OffsetsList(),
                        OffsetsCommit("g", (OffsetRow(TOPIC, rng.randrange(-2, 3), rng.randrange(-2, 10)),)),
                    ]
                ),
            )
        ),
        pm.RequestKind.MOVES: b"",
        pm.RequestKind.GROUPS: pg.encode_groups_request(
            GroupsRequest(
                _group(rng),
                rng.choice(
                    [
                        GroupJoin("g", g.JoinRequest("", rng.randrange(-2, 10**7), 1000, ("range",))),
                        GroupSync("g", g.SyncRequest("m", 1, (("m", frozenset({(TOPIC, 0)})),))),
                        GroupHeartbeat("g", g.HeartbeatRequest("m", rng.randrange(-2, 3))),
                        GroupLeave("g", g.LeaveRequest("m", "i")),
                        GroupDescribe("g"),
                        GroupDelete(f"fz-{rng.randrange(4)}"),
                        GroupsList(),
                    ]
                ),
            )
        ),
        pm.RequestKind.SEGMENT_CHUNK: pm.encode_chunk_request(
            SegmentChunkRequest(
                _group(rng), rng.randrange(2**62), rng.randrange(2**62), rng.randrange(2**32), 0, 1 << 20
            )
        ),
    }


def _request_frame(rng: random.Random, call_id: int) -> tuple[str, bytes]:
    bodies = _valid_bodies(rng)
    kind = rng.choice([*bodies, 0, 6, 255])
    how = rng.choice(["random", "mutated", "truncated", "wrong kind", "json five", "valid"])
    own = bodies.get(kind, b"")
    if how == "random":
        body = rng.randbytes(rng.randrange(64))
    elif how == "mutated":
        body = _mutate(rng, own)
    elif how == "truncated":
        body = own[: rng.randrange(len(own))] if own else b""
    elif how == "wrong kind":
        body = bodies[rng.choice([k for k in bodies if k != kind])]
    elif how == "json five":
        body = b"5"
    else:
        if kind == pm.RequestKind.CONTROLLER:
            how, body = "mutated", _mutate(rng, own)  # a valid controller request would change the cluster
        else:
            body = own
    head = _CALL_HEAD.pack(call_id, kind) if rng.random() > 0.05 else b"\x01\x02"  # sometimes no whole head
    name = pm.RequestKind(kind).name if kind in bodies else f"kind {kind}"
    return f"REQUEST {name} {how}", _frame(FrameType.REQUEST, head + body)


def _any_frame(rng: random.Random, to: int, call_id: int) -> tuple[str, bytes]:
    roll = rng.random()
    if roll < 0.3:
        return "RAFT", _raft_frame(rng, to)
    if roll < 0.45:
        return "HEARTBEATS", _heartbeats_frame(rng)
    if roll < 0.85:
        return _request_frame(rng, call_id)
    if roll < 0.9:
        return "RESPONSE", _frame(FrameType.RESPONSE, _CALL_HEAD.pack(rng.randrange(2**64), 0) + rng.randbytes(8))
    if roll < 0.95:
        return "unknown type", _frame(rng.choice([0, 6, 7, 200, 255]), rng.randbytes(rng.randrange(32)))
    return "lying length", struct.pack("<IB", rng.choice([0, 2**31, 2**32 - 1, 70 << 20]), FrameType.RAFT)


class _Stranger:
    """A raw connection to one node's peer port, said HELLO on as node 99; dials again when closed."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.address = (host, int(port))
        self.sock: socket.socket | None = None
        self.pending = b""
        self.connects = 0
        self.closed_by_node = 0
        self.responses: Counter[int] = Counter()  # status -> count

    def send(self, frame: bytes) -> None:
        for _ in range(3):
            if self.sock is None:
                self.sock = socket.create_connection(self.address, timeout=5)
                self.sock.sendall(_hello(STRANGER, CLUSTER_ID))
                self.connects += 1
                self.pending = b""
            try:
                self.sock.sendall(frame)
                self.drain()
                return
            except OSError:
                self._closed()

    def drain(self, wait_s: float = 0.0) -> None:
        """Read what the node answered (RESPONSE frames); notice when it closed the connection."""
        if self.sock is None:
            return
        self.sock.settimeout(wait_s if wait_s > 0 else 0.0)  # 0.0: non-blocking
        try:
            while True:
                data = self.sock.recv(1 << 16)
                if not data:
                    self._closed()
                    return
                self.pending += data
                self._parse()
        except (BlockingIOError, TimeoutError):
            pass
        except OSError:
            self._closed()

    def _parse(self) -> None:
        while len(self.pending) >= 4:
            (length,) = struct.unpack_from("<I", self.pending)
            if len(self.pending) < 4 + length:
                return
            frame, self.pending = self.pending[4 : 4 + length], self.pending[4 + length :]
            assert frame[0] == FrameType.RESPONSE, f"the node sent frame type {frame[0]} to a stranger"
            self.responses[frame[1 + 8]] += 1

    def _closed(self) -> None:
        self.closed_by_node += 1
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
        self.sock = None

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def _assert_alive(info: ClusterInfo) -> None:
    for node_id, node in info.nodes.items():
        try:
            os.kill(node.pid, 0)
        except ProcessLookupError:
            raise AssertionError(f"node {node_id} (pid {node.pid}) stopped while being fuzzed") from None
        cmdline = Path(f"/proc/{node.pid}/cmdline").read_bytes()
        assert str(node.config_path).encode() in cmdline, f"node {node_id}'s pid {node.pid} is not our process"
        status = Path(f"/proc/{node.pid}/stat").read_text().split(")")[-1].split()[0]
        assert status != "Z", f"node {node_id} (pid {node.pid}) exited"


def _assert_serves(cluster: Cluster, before: dict[int, list[tuple[int, bytes]]], batch: int) -> None:
    for partition in range(PARTITIONS):
        value = b"after-batch-%d-%d" % (batch, partition)
        offset = produce(cluster.client, TOPIC, partition, [value], timeout_s=30)
        records = fetch_all(cluster.client, TOPIC, partition, timeout_s=30)
        assert records[: len(before[partition])] == before[partition], f"partition {partition}: records changed"
        assert (offset, value) in records, f"partition {partition}: the record produced after batch {batch} is lost"


def test_a_stranger_speaking_garbage_on_the_peer_port_stops_no_node_and_loses_nothing(cluster: Cluster) -> None:
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    for partition in range(PARTITIONS):
        for i in range(5):
            produce(cluster.client, TOPIC, partition, [b"before-%d-%d-%d" % (partition, i, r) for r in range(3)])
    before = {p: fetch_all(cluster.client, TOPIC, p) for p in range(PARTITIONS)}
    assert all(len(records) == 15 for records in before.values())

    rng = random.Random(SEED)
    info = cluster.info
    strangers = {node_id: _Stranger(node.peer_address) for node_id, node in info.nodes.items()}
    sent: Counter[str] = Counter()
    started = time.monotonic()
    try:
        for batch in range(BATCHES):
            if time.monotonic() - started > MAX_SECONDS:
                break
            for n in range(FRAMES_PER_BATCH):
                node_id = rng.choice(list(strangers))
                kind, frame = _any_frame(rng, node_id, call_id=batch * FRAMES_PER_BATCH + n + 1)
                strangers[node_id].send(frame)
                strangers[node_id].drain(wait_s=0.01)  # see a close before the next frame is lost in it
                sent["frames"] += 1
                sent[kind] += 1
            for stranger in strangers.values():
                stranger.drain(wait_s=0.2)
            _assert_alive(info)
            _assert_serves(cluster, before, batch)
    finally:
        for stranger in strangers.values():
            stranger.close()
    elapsed = time.monotonic() - started
    frames = sent.pop("frames")
    print(
        f"peer fuzz: {frames} frames in {elapsed:.1f}s; by kind {dict(sorted(sent.items()))}; "
        f"connections {sum(s.connects for s in strangers.values())}, "
        f"closed by the nodes {sum(s.closed_by_node for s in strangers.values())}, "
        f"responses by status {dict(sum((s.responses for s in strangers.values()), Counter()))}"
    )
    assert frames >= FRAMES_PER_BATCH, "the fuzzer ran out of time before one batch"
    assert sum(s.connects for s in strangers.values()) > len(strangers), "no frame made a node close the connection"
    assert sum(sum(s.responses.values()) for s in strangers.values()), "no request was answered"

    wait_settled(cluster, TOPIC, timeout_s=30, preferred_leaders=False)
    assert all(p.leader for p in cluster.describe(TOPIC).partitions)
    _assert_alive(info)
    cluster.client.close()
    cluster_down(info.directory)
    assert_replicas_identical(info.directory, TOPIC, PARTITIONS)
