"""Fuzzing every gRPC method of a real 3-node cluster with Hypothesis-generated requests.

Random bytes as batches, flipped bits, lying headers, huge sizes, negative and enormous numbers, unknown
topics, names with odd characters, repeated fields of hundreds of thousands of items. Every request must end
with a *precise* status (a multiraft reason and a gRPC code other than INTERNAL or UNKNOWN, or success), the
node asked must still serve after each, the data committed before the fuzzing must read back unchanged after
it, and every replica must hold the same bytes. ``test_every_rpc_is_fuzzed`` keeps the list complete.

CI runs the derandomized ``ci`` profile (examples derive from each test's source); ``-m slow`` (or
``HYPOTHESIS_PROFILE=wide``) runs a randomized search ten times as long. DrainNode is fuzzed only with ids
that are not the cluster's (the other fuzzers need every node active); UndrainNode of any id; RemoveNode of a
real node is refused while it holds replicas, as all three do here.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from multiraft.errors import REASONS
from multiraft.tools.launcher import cluster_down, cluster_status, node_serving
from rpc.proto import multiraft_pb2 as pb
from rpc.proto import multiraft_pb2_grpc as pb_grpc
from rpc.proto.status import from_rpc_error
from storage import HEADER_SIZE, encode_batch
from tests.integration._helpers import Cluster, assert_replicas_identical, fetch_all, produce, wait_settled

pytestmark = pytest.mark.integration

TOPIC = "fuzzed"
KNOWN_REASONS = REASONS
IMPRECISE = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}
WIDE = settings.default.max_examples >= 1_000  # the wide profile is loaded: search randomly, and longer


def fuzz(examples: int) -> settings:
    """``examples`` per test under the derandomized ci profile, ten times as many random ones when wide."""
    return settings(
        max_examples=examples * 10 if WIDE else examples, deadline=None, suppress_health_check=list(HealthCheck)
    )


FUZZ = fuzz(60)
FUZZED_RPCS: set[str] = set()  # every RPC some test below fuzzes


def fuzzes(*rpcs: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    FUZZED_RPCS.update(rpcs)
    return lambda test: test


odd_names = st.one_of(
    st.just(TOPIC),
    st.sampled_from(["", "ghost", "__consumer_offsets", "__cluster_metadata", "../etc", "a" * 300, "t\x00x"]),
    st.from_regex(r"[a-z][a-z0-9._-]{0,10}", fullmatch=True),
    st.text(max_size=40),
)
int32s = st.one_of(st.sampled_from([0, 1, 2, -1, 2**31 - 1, -(2**31)]), st.integers(-(2**31), 2**31 - 1))
int64s = st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, 1, -1, 2**62]))


def large(elements: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    """A few items, or a short pattern repeated to thousands or hundreds of thousands (around the node's
    max_request_items of 10,000)."""
    repeated = st.tuples(st.lists(elements, min_size=1, max_size=3), st.sampled_from([1_000, 3_334, 10_001, 100_000]))
    return st.one_of(st.lists(elements, max_size=4), repeated.map(lambda pattern: pattern[0] * pattern[1]))


def _valid_batch(values: list[bytes]) -> bytes:
    return encode_batch(values, timestamps_ms=int(time.time() * 1000))


@st.composite
def batches(draw: st.DrawFn) -> bytes:
    """Mostly broken record batches: random bytes, bit flips, lying header fields, truncations."""
    valid = _valid_batch(draw(st.lists(st.binary(max_size=64), min_size=1, max_size=5)))
    kind = draw(st.sampled_from(["random", "flip", "header", "truncate", "extend", "valid", "idempotent", "huge"]))
    if kind == "random":
        return draw(st.binary(max_size=512))
    if kind == "flip":
        position = draw(st.integers(0, len(valid) - 1))
        return valid[:position] + bytes([valid[position] ^ (1 << draw(st.integers(0, 7)))]) + valid[position + 1 :]
    if kind == "header":  # overwrite one header field with a random value (the CRC may or may not cover it)
        at, fmt = draw(
            st.sampled_from(
                [(8, "<I"), (12, "<B"), (17, "<H"), (19, "<i"), (39, "<q"), (47, "<h"), (49, "<i"), (53, "<I")]
            )
        )
        size = struct.calcsize(fmt)
        value = draw(st.integers(0, 2 ** (8 * size) - 1))
        return valid[:at] + value.to_bytes(size, "little") + valid[at + size :]
    if kind == "truncate":
        return valid[: draw(st.integers(0, len(valid) - 1))]
    if kind == "extend":
        return valid + draw(st.binary(min_size=1, max_size=64))
    if kind == "idempotent":
        return encode_batch(
            [b"i"],
            timestamps_ms=1,
            producer_id=draw(st.integers(-5, 2**40)),
            producer_epoch=draw(st.integers(-5, 5)),
            base_sequence=draw(st.integers(-5, 2**31 - 1)),
        )
    if kind == "huge":
        return _valid_batch([b"x" * (5 * 1024 * 1024)])
    return valid[:HEADER_SIZE] + valid[HEADER_SIZE:]


def _stub(cluster: Cluster, node_id: int) -> Any:
    return cluster.client.log_stub(cluster.info.nodes[node_id].client_address)


def _admin(cluster: Cluster, node_id: int) -> Any:
    return cluster.client.admin_stub(cluster.info.nodes[node_id].client_address)


def _answered_precisely(call: Callable[[], object], cluster: Cluster | None = None, node: int = 0) -> None:
    """``call`` succeeds or fails with a precise status; then the node asked (if named) still serves."""
    try:
        call()
    except grpc.RpcError as exc:
        code = exc.code()  # type: ignore[attr-defined]
        assert code not in IMPRECISE, f"imprecise status {code}: {exc.details()}"  # type: ignore[attr-defined]
        if code not in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED):
            assert from_rpc_error(exc).reason in KNOWN_REASONS
    if cluster is not None:
        assert node_serving(cluster.info.nodes[node].client_address, 10), f"node {node} stopped serving"


@pytest.fixture(scope="module")
def fuzzed(shared_cluster: Cluster) -> Iterator[tuple[Cluster, dict[int, list[tuple[int, bytes]]]]]:
    shared_cluster.create_topic(TOPIC, partitions=2, replication_factor=3, max_message_bytes="1048576")
    for partition in (0, 1):
        for i in range(20):
            produce(shared_cluster.client, TOPIC, partition, [b"committed-%d-%d" % (partition, i)])
    before = {p: fetch_all(shared_cluster.client, TOPIC, p) for p in (0, 1)}
    yield shared_cluster, before
    nodes = cluster_status(shared_cluster.info.directory)
    assert all(node["serving"] for node in nodes), f"a node stopped serving while being fuzzed: {nodes}"
    for partition in (0, 1):
        after = fetch_all(shared_cluster.client, TOPIC, partition)
        assert after[: len(before[partition])] == before[partition], "committed data changed"
    wait_settled(shared_cluster, TOPIC, timeout_s=60, preferred_leaders=False)
    cluster_down(shared_cluster.info.directory)
    assert_replicas_identical(shared_cluster.info.directory, TOPIC, 2)


@fuzzes("Produce")
@FUZZ
@given(node=st.integers(1, 3), topic=odd_names, partition=int32s, batch=batches(), timeout_ms=int32s)
def test_produce_answers_every_request_precisely(
    fuzzed: tuple[Cluster, Any], node: int, topic: str, partition: int, batch: bytes, timeout_ms: int
) -> None:
    cluster, _ = fuzzed
    request = pb.ProduceRequest(topic=topic, partition=partition, batch=batch, timeout_ms=min(timeout_ms, 2_000))
    _answered_precisely(lambda: _stub(cluster, node).Produce(request, timeout=10))


@fuzzes("Fetch")
@FUZZ
@given(
    node=st.integers(1, 3),
    topic=odd_names,
    partition=int32s,
    offset=int64s,
    max_bytes=int32s,
    max_wait_ms=st.integers(-10, 50),
    min_bytes=int32s,
)
def test_fetch_answers_every_request_precisely(
    fuzzed: tuple[Cluster, Any],
    node: int,
    topic: str,
    partition: int,
    offset: int,
    max_bytes: int,
    max_wait_ms: int,
    min_bytes: int,
) -> None:
    cluster, _ = fuzzed
    request = pb.FetchRequest(
        topic=topic,
        partition=partition,
        offset=offset,
        max_bytes=max_bytes,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
    )
    _answered_precisely(lambda: _stub(cluster, node).Fetch(request, timeout=10))


@fuzzes("ListOffsets")
@FUZZ
@given(
    node=st.integers(1, 3),
    topic=odd_names,
    partitions=large(int32s),
    spec=st.integers(-3, 6),
    timestamp=int64s,
)
@example(node=1, topic=TOPIC, partitions=[], spec=pb.TIMESTAMP, timestamp=-1)  # found by the wide search: INTERNAL
def test_list_offsets_answers_every_request_precisely(
    fuzzed: tuple[Cluster, Any], node: int, topic: str, partitions: list[int], spec: int, timestamp: int
) -> None:
    cluster, _ = fuzzed
    request = pb.ListOffsetsRequest(topic=topic, partitions=partitions, spec=spec, timestamp_ms=timestamp)  # type: ignore[arg-type]
    _answered_precisely(lambda: _stub(cluster, node).ListOffsets(request, timeout=30), cluster, node)


@fuzzes("CommitOffsets", "FetchOffsets")
@FUZZ
@given(
    node=st.integers(1, 3),
    group=st.one_of(st.text(max_size=20), st.just("x" * 400)),
    rows=large(st.tuples(odd_names, int32s, int64s, st.text(max_size=20))),
    fetch=st.booleans(),
)
def test_offset_commits_and_fetches_answer_every_request_precisely(
    fuzzed: tuple[Cluster, Any], node: int, group: str, rows: list[tuple[str, int, int, str]], fetch: bool
) -> None:
    cluster, _ = fuzzed
    if fetch:
        request: Any = pb.FetchOffsetsRequest(
            group=group, partitions=[pb.TopicPartition(topic=t, partition=p) for t, p, _, _ in rows]
        )
        _answered_precisely(lambda: _stub(cluster, node).FetchOffsets(request, timeout=30), cluster, node)
    else:
        request = pb.CommitOffsetsRequest(
            group=group,
            offsets=[pb.CommittedOffset(topic=t, partition=p, offset=o, metadata=m) for t, p, o, m in rows],
        )
        _answered_precisely(lambda: _stub(cluster, node).CommitOffsets(request, timeout=30), cluster, node)


@fuzzes("CreateTopic", "DeleteTopic")
@FUZZ
@given(
    node=st.integers(1, 3),
    name=odd_names,
    partitions=int32s,
    replication_factor=int32s,
    configs=st.dictionaries(
        st.sampled_from(["retention.ms", "segment.bytes", "max.message.bytes", "colour", ""]),
        st.one_of(st.text(max_size=8), st.integers(-(2**70), 2**70).map(str)),
        max_size=2,
    ),
)
def test_create_topic_answers_every_request_precisely(
    fuzzed: tuple[Cluster, Any], node: int, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
) -> None:
    cluster, _ = fuzzed
    partitions = partitions if partitions > 64 or partitions < 1 else min(partitions, 3)  # keep valid ones small
    request = pb.CreateTopicRequest(
        name=name, partitions=partitions, replication_factor=replication_factor, configs=configs
    )

    def create_then_clean_up() -> None:
        _admin(cluster, node).CreateTopic(request, timeout=30)
        if name != TOPIC:
            _admin(cluster, node).DeleteTopic(pb.DeleteTopicRequest(name=name), timeout=30)

    _answered_precisely(create_then_clean_up)


@fuzzes("CreatePartitions")  # issue 25
@fuzz(20)
@given(node=st.integers(1, 3), name=odd_names, total=int32s, own=st.booleans())
def test_create_partitions_answers_every_request_precisely(
    fuzzed: tuple[Cluster, Any], node: int, name: str, total: int, own: bool
) -> None:
    """Of odd names, of the fuzzed topic (never grown: the fixture checks it whole), or of a fresh topic."""
    cluster, _ = fuzzed
    admin = _admin(cluster, node)
    if name == TOPIC:
        total = min(total, 2)
    if own:
        name = "grow-me"
        total = total if total > 64 or total < 1 else min(total, 3)  # keep valid ones small
        admin.CreateTopic(pb.CreateTopicRequest(name=name, partitions=1, replication_factor=1), timeout=30)
    try:
        request = pb.CreatePartitionsRequest(name=name, total=total)
        _answered_precisely(lambda: admin.CreatePartitions(request, timeout=30), cluster, node)
    finally:
        if own:
            admin.DeleteTopic(pb.DeleteTopicRequest(name=name), timeout=30)


@fuzzes("DeleteRecords")  # issue 25
@FUZZ
@given(node=st.integers(1, 3), topic=odd_names, partition=int32s, offset=int64s, timeout_ms=int32s)
def test_delete_records_answers_every_request_precisely(
    fuzzed: tuple[Cluster, Any], node: int, topic: str, partition: int, offset: int, timeout_ms: int
) -> None:
    """Of odd names and offsets; of the fuzzed topic only offsets that delete nothing (the fixture checks it
    whole): at or below its log start, 0, and never -1 (the high watermark)."""
    cluster, _ = fuzzed
    if topic == TOPIC:
        offset = min(offset, 0) if offset != -1 else 0
    request = pb.DeleteRecordsRequest(
        topic=topic, partition=partition, offset=offset, timeout_ms=min(max(timeout_ms, 0), 2_000)
    )
    _answered_precisely(lambda: _stub(cluster, node).DeleteRecords(request, timeout=10), cluster, node)


_CLUSTER_KEYS = ["log.retention.ms", "log.retention.bytes", "message.max.bytes", "log.segment.bytes", "log.roll.ms"]


@fuzzes("DescribeClusterConfigs", "AlterClusterConfigs")  # issue 25
@FUZZ
@given(
    node=st.integers(1, 3),
    set_=st.dictionaries(
        st.one_of(st.sampled_from(_CLUSTER_KEYS), st.text(max_size=8)),
        # never a small retention or size that would drop or refuse the fuzzed topic's records
        st.one_of(st.sampled_from(["-1", "9223372036854775807", "", "x", "1e3", " 86400000 "]), st.text(max_size=6)),
        max_size=3,
    ),
    delete=large(st.one_of(st.sampled_from(_CLUSTER_KEYS), st.text(max_size=8))),
    keys=large(st.one_of(st.sampled_from(_CLUSTER_KEYS), st.text(max_size=8))),
)
def test_cluster_configs_answer_every_request_precisely(
    fuzzed: tuple[Cluster, Any], node: int, set_: dict[str, str], delete: list[str], keys: list[str]
) -> None:
    cluster, _ = fuzzed
    safe = {k: v for k, v in set_.items() if not (v.strip().isdigit() and int(v.strip()) < 1 << 40)}
    admin = _admin(cluster, node)
    try:
        request = pb.AlterClusterConfigsRequest(set=safe, delete=delete)
        _answered_precisely(lambda: admin.AlterClusterConfigs(request, timeout=30), cluster, node)
        _answered_precisely(
            lambda: admin.DescribeClusterConfigs(pb.DescribeClusterConfigsRequest(keys=keys), timeout=30)
        )
    finally:
        admin.AlterClusterConfigs(pb.AlterClusterConfigsRequest(delete=_CLUSTER_KEYS), timeout=30)


@fuzzes("AlterTopicConfigs", "DescribeTopic", "Metadata")
@FUZZ
@given(
    node=st.integers(1, 3),
    name=odd_names,
    set_=st.dictionaries(
        st.sampled_from(["retention.ms", "segment.bytes", "cleanup.policy", "x"]), st.text(max_size=6), max_size=2
    ),
    delete=large(st.sampled_from(["retention.ms", "nope", ""])),
)
def test_alter_and_describe_answer_every_request_precisely(
    fuzzed: tuple[Cluster, Any], node: int, name: str, set_: dict[str, str], delete: list[str]
) -> None:
    cluster, _ = fuzzed
    if name == TOPIC:
        set_ = {k: v for k, v in set_.items() if k not in ("retention.ms", "segment.bytes")}  # keep the data
    admin = _admin(cluster, node)
    _answered_precisely(
        lambda: admin.AlterTopicConfigs(pb.AlterTopicConfigsRequest(name=name, set=set_, delete=delete), timeout=30)
    )
    _answered_precisely(lambda: admin.DescribeTopic(pb.DescribeTopicRequest(name=name), timeout=30))
    _answered_precisely(lambda: admin.Metadata(pb.MetadataRequest(topics=[name]), timeout=30), cluster, node)


@fuzzes("ProduceStream")
@fuzz(20)
@given(
    node=st.integers(1, 3),
    requests=st.lists(st.tuples(odd_names, int32s, batches()), min_size=1, max_size=6),
)
def test_produce_stream_answers_every_item_precisely(
    fuzzed: tuple[Cluster, Any], node: int, requests: list[tuple[str, int, bytes]]
) -> None:
    cluster, _ = fuzzed
    messages = [pb.ProduceRequest(topic=t, partition=p, batch=b, sequence=i) for i, (t, p, b) in enumerate(requests)]

    def stream() -> None:
        responses = list(_stub(cluster, node).ProduceStream(iter(messages), timeout=30))
        assert [r.sequence for r in responses] == list(range(len(messages)))
        for response in responses:
            if response.error.reason:
                assert response.error.reason in KNOWN_REASONS
                assert response.error.code not in (grpc.StatusCode.INTERNAL.value[0], grpc.StatusCode.UNKNOWN.value[0])

    _answered_precisely(stream, cluster, node)


@fuzzes("Metadata")
@fuzz(30)
@given(node=st.integers(1, 3), topics=large(odd_names))
def test_metadata_of_many_names_answers_precisely(fuzzed: tuple[Cluster, Any], node: int, topics: list[str]) -> None:
    cluster, _ = fuzzed
    request = pb.MetadataRequest(topics=topics)
    _answered_precisely(lambda: _admin(cluster, node).Metadata(request, timeout=30), cluster, node)


@fuzzes("Subscribe")
@fuzz(20)
@given(node=st.integers(1, 3), topic=odd_names, partition=int32s, offset=int64s, max_bytes=int32s)
def test_subscribe_answers_every_request_precisely(
    fuzzed: tuple[Cluster, Any], node: int, topic: str, partition: int, offset: int, max_bytes: int
) -> None:
    cluster, _ = fuzzed
    request = pb.SubscribeRequest(topic=topic, partition=partition, offset=offset, max_bytes=max_bytes)

    def first_item() -> None:
        call = _stub(cluster, node).Subscribe(request, timeout=2)  # a valid one waits for records: the deadline
        try:
            for item in call:
                if item.error.reason:
                    assert item.error.reason in KNOWN_REASONS
                    assert item.error.code not in (grpc.StatusCode.INTERNAL.value[0], grpc.StatusCode.UNKNOWN.value[0])
                break
        finally:
            call.cancel()

    _answered_precisely(first_item, cluster, node)


NO_ARGUMENTS = {
    "InitProducer": ("log", pb.InitProducerRequest),
    "ListGroups": ("admin", pb.ListGroupsRequest),
    "DescribeCluster": ("admin", pb.DescribeClusterRequest),
    "ListTopics": ("admin", pb.ListTopicsRequest),
}


@fuzzes(*NO_ARGUMENTS)
@fuzz(20)
@given(node=st.integers(1, 3), rpc=st.sampled_from(sorted(NO_ARGUMENTS)), unknown=st.binary(max_size=64))
def test_requests_without_fields_answer_precisely_whatever_bytes_they_carry(
    fuzzed: tuple[Cluster, Any], node: int, rpc: str, unknown: bytes
) -> None:
    """The request's bytes are random: unknown fields are skipped, bytes that do not parse are refused."""
    cluster, _ = fuzzed
    service, _ = NO_ARGUMENTS[rpc]
    path = f"/multiraft.v1.{'Log' if service == 'log' else 'Admin'}/{rpc}"
    channel = cluster.client.channel(cluster.info.nodes[node].client_address)
    _answered_precisely(lambda: channel.unary_unary(path)(unknown, timeout=30), cluster, node)


@fuzzes("DrainNode", "RemoveNode", "UndrainNode")
@fuzz(20)
@given(
    node=st.integers(1, 3),
    node_id=int32s,
    operation=st.sampled_from(["drain", "remove", "undrain"]),
    force=st.booleans(),
)
def test_drain_undrain_and_remove_answer_every_request_precisely(
    fuzzed: tuple[Cluster, Any], node: int, node_id: int, operation: str, force: bool
) -> None:
    cluster, _ = fuzzed
    admin = _admin(cluster, node)
    if operation == "remove":  # of a member too: every node holds replicas here, so the removal is refused
        request: Any = pb.RemoveNodeRequest(node_id=node_id if node_id > 3 else abs(node_id) % 4)
        _answered_precisely(lambda: admin.RemoveNode(request, timeout=30), cluster, node)
    elif operation == "undrain":  # of a member too: undraining an active node changes nothing
        request = pb.UndrainNodeRequest(node_id=node_id if node_id > 3 else abs(node_id) % 4)
        _answered_precisely(lambda: admin.UndrainNode(request, timeout=30), cluster, node)
    else:  # never of a member: the other fuzzers need every node active
        request = pb.DrainNodeRequest(node_id=node_id if node_id not in cluster.info.nodes else -node_id, force=force)
        _answered_precisely(lambda: admin.DrainNode(request, timeout=30), cluster, node)


GROUP_RPCS = ["JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "DescribeGroups", "DeleteGroups"]
group_names = st.one_of(st.sampled_from(["fuzz-group", "", "x" * 400, "__consumer_offsets"]), st.text(max_size=20))
partitions_pb = large(st.builds(pb.TopicPartition, topic=odd_names, partition=int32s))


@fuzzes(*GROUP_RPCS)
@fuzz(40)
@given(
    node=st.integers(1, 3),
    rpc=st.sampled_from([*GROUP_RPCS, "CommitOffsets"]),
    group=group_names,
    member=st.one_of(st.just(""), st.text(max_size=20)),
    instance=st.one_of(st.just(""), st.text(max_size=8)),
    numbers=st.tuples(int32s, int32s, int32s),
    protocols=large(st.one_of(st.sampled_from(["range", "roundrobin", "sticky", "cooperative-sticky"]), st.text())),
    owned=partitions_pb,
    user_data=st.binary(max_size=64),
)
def test_group_calls_answer_every_request_precisely(
    fuzzed: tuple[Cluster, Any],
    node: int,
    rpc: str,
    group: str,
    member: str,
    instance: str,
    numbers: tuple[int, int, int],
    protocols: list[str],
    owned: list[Any],
    user_data: bytes,
) -> None:
    """Members that are not in the group are refused at once (no request waits here for a rebalance)."""
    cluster, _ = fuzzed
    stub = pb_grpc.GroupsStub(cluster.client.channel(cluster.info.nodes[node].client_address))
    session, rebalance, generation = numbers
    subscription = pb.GroupSubscription(
        topics=[TOPIC, *protocols[:3]], owned=owned, owned_generation=generation, rack=instance, user_data=user_data
    )
    # A join with a member id the group never handed out is refused before it could wait for a generation.
    joining = member or "not-a-member"
    requests: dict[str, Callable[[], object]] = {
        "JoinGroup": lambda: stub.JoinGroup(
            pb.JoinGroupRequest(
                group=group,
                member_id=joining,
                group_instance_id=instance,
                session_timeout_ms=session,
                rebalance_timeout_ms=rebalance,
                protocols=protocols,
                subscription=subscription,
                protocol_type=instance,
                client_id=member,
            ),
            timeout=30,
        ),
        "SyncGroup": lambda: stub.SyncGroup(
            pb.SyncGroupRequest(
                group=group,
                member_id=joining,
                generation=generation,
                group_instance_id=instance,
                assignments=[pb.MemberAssignment(member_id=member, partitions=owned)],
                protocol_name=instance,
            ),
            timeout=30,
        ),
        "Heartbeat": lambda: stub.Heartbeat(
            pb.GroupHeartbeatRequest(group=group, member_id=member, generation=generation, group_instance_id=instance),
            timeout=30,
        ),
        "LeaveGroup": lambda: stub.LeaveGroup(
            pb.LeaveGroupRequest(group=group, member_id=member, group_instance_id=instance), timeout=30
        ),
        "DescribeGroups": lambda: stub.DescribeGroups(
            pb.DescribeGroupsRequest(groups=[group, *protocols[:20]]), timeout=30
        ),
        "DeleteGroups": lambda: stub.DeleteGroups(pb.DeleteGroupsRequest(groups=[group, *protocols[:2]]), timeout=30),
        "CommitOffsets": lambda: _stub(cluster, node).CommitOffsets(
            pb.CommitOffsetsRequest(
                group=group,
                offsets=[pb.CommittedOffset(topic=tp.topic, partition=tp.partition, offset=1) for tp in owned],
                member_id=member,
                generation=generation,
                group_instance_id=instance,
            ),
            timeout=30,
        ),
    }
    _answered_precisely(requests[rpc], cluster, node)


acl_words = st.one_of(
    st.sampled_from(["", "topic", "group", "cluster", "literal", "prefixed", "read", "all", "allow", "deny", "*"]),
    st.sampled_from(["User:alice", "User:*", "User:", "alice", "multiraft-cluster", "cluster-action"]),
    st.text(max_size=12),
)
acl_fields = st.tuples(*(acl_words,) * 6)


SECURITY_RPCS = ["Authenticate", "UpsertUser", "DeleteUser", "ListUsers", "CreateAcls", "DeleteAcls", "DescribeAcls"]


@fuzzes(*SECURITY_RPCS)
@fuzz(30)
@given(
    node=st.integers(1, 3),
    rpc=st.sampled_from(SECURITY_RPCS),
    name=odd_names,
    message=st.one_of(st.text(max_size=80), st.sampled_from(["n,,n=u,r=abc", "n,,", "c=biws,r=x,p=AAAA", "y,,"])),
    salt=st.binary(max_size=80),
    iterations=int32s,
    keys=st.tuples(st.binary(max_size=40), st.binary(max_size=40)),
    bindings=large(acl_fields),
)
def test_authentication_users_and_acls_answer_every_request_precisely(
    fuzzed: tuple[Cluster, Any],
    node: int,
    rpc: str,
    name: str,
    message: str,
    salt: bytes,
    iterations: int,
    keys: tuple[bytes, bytes],
    bindings: list[tuple[str, ...]],
) -> None:
    """On a cluster without authentication, Authenticate is refused (UNAUTHENTICATED); users and ACLs change."""
    cluster, _ = fuzzed
    stub = pb_grpc.SecurityStub(cluster.client.channel(cluster.info.nodes[node].client_address))
    fields = ("principal", "resource_type", "resource_name", "pattern_type", "operation", "permission")
    acls = [pb.AclBinding(**dict(zip(fields, row, strict=True))) for row in bindings]
    requests: dict[str, Callable[[], object]] = {
        "Authenticate": lambda: stub.Authenticate(
            pb.AuthenticateRequest(mechanism="SCRAM-SHA-256", session_id=name, message=message), timeout=30
        ),
        "UpsertUser": lambda: stub.UpsertUser(
            pb.UpsertUserRequest(
                name=name,
                credential=pb.ScramCredential(salt=salt, iterations=iterations, stored_key=keys[0], server_key=keys[1]),
            ),
            timeout=30,
        ),
        "DeleteUser": lambda: stub.DeleteUser(pb.DeleteUserRequest(name=name), timeout=30),
        "ListUsers": lambda: stub.ListUsers(pb.ListUsersRequest(), timeout=30),
        "CreateAcls": lambda: stub.CreateAcls(pb.CreateAclsRequest(bindings=acls), timeout=30),
        "DeleteAcls": lambda: stub.DeleteAcls(
            pb.DeleteAclsRequest(filters=[pb.AclFilter(**dict(zip(fields, row, strict=True))) for row in bindings]),
            timeout=30,
        ),
        "DescribeAcls": lambda: stub.DescribeAcls(
            pb.DescribeAclsRequest(filter=pb.AclFilter(principal=name)), timeout=30
        ),
    }
    _answered_precisely(requests[rpc], cluster, node)


def test_every_rpc_is_fuzzed() -> None:
    methods = {m.name for service in pb.DESCRIPTOR.services_by_name.values() for m in service.methods}
    assert methods == FUZZED_RPCS


@pytest.mark.slow
def test_the_wide_search_runs_every_fuzzer_randomly_under_slow() -> None:
    """``-m slow`` selects only slow tests: run this module's fuzzers again with the wide profile loaded."""
    command = [sys.executable, "-m", "pytest", __file__, "-q", "-p", "no:cacheprovider", "-m", "not slow"]
    env = {**os.environ, "HYPOTHESIS_PROFILE": "wide"}
    result = subprocess.run(command, env=env, timeout=3 * 3600, check=False, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-5_000:]
