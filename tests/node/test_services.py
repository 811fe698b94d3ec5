"""The node's services, in-process over fakes of their protocols: what a client gets for what it asks."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from multiraft import controller as ctl
from multiraft.config.node import NodeConfig
from multiraft.errors import (
    CorruptBatchError,
    DrainRefusedError,
    InvalidArgumentError,
    InvalidProducerEpochError,
    NotLeaderError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    RequestTimeoutError,
    StorageFailureError,
    UnavailableError,
    UnknownNodeError,
    UnknownPartitionError,
    UnknownProducerIdError,
    UnknownTopicError,
)
from multiraft.node.cluster.status import MoveReporter
from multiraft.node.peer.messages import (
    STATUS_ERROR,
    STATUS_OK,
    RequestKind,
    decode_offsets_request,
    encode_error,
    encode_offset_rows,
)
from multiraft.node.replicas.offsets import OFFSETS_TOPIC
from multiraft.node.services import (
    AdminService,
    AdminSettings,
    DataLimits,
    DataService,
    OffsetsService,
    OffsetsSettings,
)
from multiraft.node.vocabulary.controller import CreateTopicRequest
from multiraft.node.vocabulary.offsets import CommittedOffset, OffsetRow, OffsetsCommit, OffsetsFetch
from multiraft.node.vocabulary.partitions import ProduceResult
from multiraft.node.vocabulary.status import LeaderAnnouncement
from storage import ENTRY_OVERHEAD_BYTES, StorageConfig
from storage.batch import encode_batch
from tests.node._fakes import (
    FakeController,
    FakeLiveness,
    FakeLog,
    FakePeers,
    FakeStatus,
    FakeStore,
    cluster_with_topic,
    directory,
    lead,
    status,
)

LIMITS = DataLimits(
    max_batch_bytes=1 << 20, produce_timeout_ms=200, fetch_max_bytes=1 << 20, fetch_max_wait_ms=0, producer_id_block=3
)


def data_service(**kwargs: Any) -> tuple[DataService, Any, FakeStore, FakeController]:
    found = directory(kwargs.pop("state", None) or cluster_with_topic())
    store, controller = FakeStore(), FakeController()
    return DataService(kwargs.pop("limits", LIMITS), found, found, store, controller), found, store, controller


def batch(*values: bytes) -> bytes:
    return encode_batch(list(values) or [b"v"], timestamps_ms=1_700_000_000_000)


# ------------------------------------------------------------------------------------------------ data service


def test_a_batch_for_a_partition_led_here_is_handed_to_the_store_and_acked_with_its_offset() -> None:
    async def scenario() -> None:
        service, found, store, _ = data_service()
        lead(found, "orders", 0)
        store.produce_results = [ProduceResult(base_offset=42, log_append_time_ms=5, duplicate=True)]
        ack = await service.produce("orders", 0, batch(b"a", b"b"), 0)
        assert (ack.base_offset, ack.log_append_time_ms, ack.duplicate) == (42, 5, True)
        assert [(view.partition, header.record_count) for view, _, header in store.produced] == [(0, 2)]

    asyncio.run(scenario())


def test_a_batch_no_log_entry_can_hold_is_refused_as_too_large_and_never_proposed() -> None:
    async def scenario() -> None:
        # A topic stored with max.message.bytes of 64 MiB, on a node whose own ceiling is as high: the batch
        # of exactly 16 MiB would still be refused by storage (its entry header takes it past max_entry_bytes).
        state = cluster_with_topic()
        topic = state.topics["orders"]
        state = replace(
            state, topics={"orders": replace(topic, configs={**topic.configs, "max.message.bytes": "67108864"})}
        )
        limits = replace(LIMITS, max_batch_bytes=64 << 20)
        service, found, store, _ = data_service(state=state, limits=limits)
        lead(found, "orders", 0)
        value = b"x" * (16 << 20)
        value = value[: len(value) - (len(batch(value)) - (16 << 20))]
        assert len(batch(value)) == 16 << 20
        with pytest.raises(RecordTooLargeError, match="log entry") as caught:
            await service.produce("orders", 0, batch(value), 0)
        assert caught.value.metadata["max_bytes"] == str(StorageConfig().max_entry_bytes - ENTRY_OVERHEAD_BYTES)
        assert store.produced == []

    asyncio.run(scenario())


def idempotent(producer_id: int, epoch: int, sequence: int = 0) -> bytes:
    return encode_batch([b"v"], timestamps_ms=1, producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)


def test_a_batch_under_a_producer_id_or_epoch_nobody_granted_is_refused_and_never_proposed() -> None:
    async def scenario() -> None:
        # The controller has handed out ids 1..99; InitProducer grants each at epoch 0.
        service, found, store, _ = data_service(state=replace(cluster_with_topic(), next_producer_id=100))
        lead(found, "orders", 0)
        with pytest.raises(UnknownProducerIdError, match="100"):
            await service.produce("orders", 0, idempotent(100, 0), 0)
        with pytest.raises(UnknownProducerIdError):
            await service.produce("orders", 0, idempotent(0, 0), 0)
        with pytest.raises(InvalidProducerEpochError, match="epoch 1"):
            await service.produce("orders", 0, idempotent(5, 1, sequence=3), 0)  # would fence producer 5
        assert store.produced == []

        store.produce_results = [ProduceResult(0, 1), ProduceResult(1, 1)]
        await service.produce("orders", 0, idempotent(5, 0), 0)
        await service.produce("orders", 0, idempotent(2**62 + 5, 7), 0)  # a replay producer's own epoch
        assert [(h.producer_id, h.producer_epoch) for _, _, h in store.produced] == [(5, 0), (2**62 + 5, 7)]

    asyncio.run(scenario())


def test_batches_begun_in_order_reach_the_store_in_order_before_any_commits() -> None:
    async def scenario() -> None:
        service, found, store, _ = data_service()
        lead(found, "orders", 1)
        store.produce_results = [None, None, None]
        futures = [service.begin_produce("orders", 1, batch(bytes([i])), 0) for i in range(3)]
        assert [bytes(b[-1:]) for _, b, _ in store.produced] == [b"\x00", b"\x01", b"\x02"]
        for future in futures:
            future.cancel()

    asyncio.run(scenario())


def test_a_partition_led_elsewhere_answers_not_leader_with_the_leaders_id_and_address() -> None:
    async def scenario() -> None:
        service, found, store, _ = data_service()
        group_id = found.cluster.partition("orders", 0).group_id
        found.learn_leaders([LeaderAnnouncement(group_id, 2, 5)])
        with pytest.raises(NotLeaderError) as caught:
            await service.produce("orders", 0, batch(), 0)
        assert caught.value.leader_id == 2
        assert caught.value.leader_address == found.cluster.nodes[2].client_address
        assert store.produced == []

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("topic", "partition", "error"),
    [("nope", 0, UnknownTopicError), ("orders", 9, UnknownPartitionError), (OFFSETS_TOPIC, 0, UnknownTopicError)],
)
def test_unknown_or_internal_partitions_are_refused_before_the_store(topic: str, partition: int, error: type) -> None:
    async def scenario() -> None:
        state = ctl.ClusterState() if topic == OFFSETS_TOPIC else None
        service, _, store, _ = data_service(state=state)
        with pytest.raises(error):
            await service.produce(topic, partition, batch(), 0)
        assert store.produced == []

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("topic", "partition", "led", "error"),
    [
        ("orders", 0, False, NotLeaderError),
        ("nope", 0, True, UnknownTopicError),
        (OFFSETS_TOPIC, 0, True, UnknownTopicError),  # the internal topics' records are the system's
        ("orders", 9, True, UnknownPartitionError),
    ],
)
def test_delete_records_goes_to_the_store_only_on_the_leader_of_a_user_partition(
    topic: str, partition: int, led: bool, error: type
) -> None:
    async def scenario() -> None:
        state = ctl.ClusterState() if topic == OFFSETS_TOPIC else None
        service, found, store, _ = data_service(state=state)
        if led and topic == "orders" and partition == 0:
            lead(found, "orders", 0)
        with pytest.raises(error):
            await service.delete_records(topic, partition, 5)
        assert store.deletions == []

    asyncio.run(scenario())


def test_delete_records_on_the_leader_answers_the_store_s_new_log_start() -> None:
    async def scenario() -> None:
        service, found, store, _ = data_service()
        lead(found, "orders", 0)
        assert await service.delete_records("orders", 0, 5, 1500) == 5
        assert [(view.partition, offset, timeout_s) for view, offset, timeout_s in store.deletions] == [(0, 5, 1.5)]
        with pytest.raises(InvalidArgumentError):
            await service.delete_records("orders", 0, 5, -1)

    asyncio.run(scenario())


def test_a_batch_over_the_limit_is_record_too_large_and_a_broken_one_is_corrupt() -> None:
    async def scenario() -> None:
        small = DataLimits(64, 200, 1 << 20, 0, 3)
        service, found, store, _ = data_service(limits=small)
        lead(found, "orders", 0)
        with pytest.raises(RecordTooLargeError):
            await service.produce("orders", 0, batch(b"x" * 100), 0)
        service, found, store, _ = data_service()
        lead(found, "orders", 0)
        broken = bytearray(batch(b"payload"))
        broken[-1] ^= 0xFF
        with pytest.raises(CorruptBatchError):
            await service.produce("orders", 0, bytes(broken), 0)
        with pytest.raises(CorruptBatchError):
            await service.produce("orders", 0, batch() + batch(), 0)
        with pytest.raises(InvalidArgumentError, match="timeout_ms"):
            await service.produce("orders", 0, batch(), -1)
        assert store.produced == []

    asyncio.run(scenario())


def test_a_batch_that_does_not_commit_in_time_answers_a_timeout_that_says_it_may_still_be_written() -> None:
    async def scenario() -> None:
        service, found, store, _ = data_service()
        lead(found, "orders", 0)
        store.produce_results = [None]
        with pytest.raises(RequestTimeoutError, match="may still be written"):
            await service.produce("orders", 0, batch(), 50)

    asyncio.run(scenario())


def test_a_batch_whose_leader_failed_after_proposing_it_answers_a_retriable_unknown_outcome() -> None:
    # The append went to the followers before the leader's own write failed: they may commit it under the next
    # leader, so a terminal error would let an idempotent producer give its sequence to other records.
    async def scenario() -> None:
        service, found, store, _ = data_service()
        lead(found, "orders", 0)
        store.produce_results = [StorageFailureError("storage failed: I/O error")]
        with pytest.raises(UnavailableError, match="may be written") as raised:
            await service.produce("orders", 0, batch(), 0)
        assert raised.value.retriable and raised.value.metadata["outcome"] == "unknown"

    asyncio.run(scenario())


def test_producer_ids_come_from_blocks_reserved_from_the_controller() -> None:
    async def scenario() -> None:
        service, _, _, controller = data_service()
        ids = [await service.init_producer() for _ in range(4)]
        assert ids == [(1000, 0), (1001, 0), (1002, 0), (1003, 0)]
        assert [type(c) for c in controller.calls] == [ctl.AllocateProducerIds, ctl.AllocateProducerIds]

    asyncio.run(scenario())


def test_fetch_outside_the_log_is_out_of_range_with_the_readable_bounds() -> None:
    async def scenario() -> None:
        service, found, _, _ = data_service()
        lead(found, "orders", 0, high_watermark=10)
        with pytest.raises(OffsetOutOfRangeError) as caught:
            await service.fetch("orders", 0, 11, 0, 0)
        assert caught.value.metadata == {"log_start_offset": "0", "high_watermark": "10"}
        result = await service.fetch("orders", 0, 3, 0, 0)
        assert result.high_watermark == 10

    asyncio.run(scenario())


def test_a_new_leader_not_yet_current_asks_readers_beyond_its_high_watermark_to_retry() -> None:
    async def scenario() -> None:
        service, found, _, _ = data_service()
        view = lead(found, "orders", 0, high_watermark=5, log=FakeLog(by_timestamp={7: 3}))
        view.update(high_watermark=5, log_start_offset=0, leader_id=1, term=2, leader=True, current=False)
        with pytest.raises(UnavailableError, match="catching up"):
            await service.fetch("orders", 0, 6, 0, 0)
        with pytest.raises(UnavailableError):
            service.list_offset("orders", 0, "latest")
        assert service.list_offset("orders", 0, "earliest") == 0
        assert service.list_offset("orders", 0, "timestamp", 7) == 3
        assert service.list_offset("orders", 0, "timestamp", 8) == -1

    asyncio.run(scenario())


# --------------------------------------------------------------------------------------------- offsets service


def offsets_service(found: Any, store: FakeStore, peers: FakePeers) -> OffsetsService:
    return OffsetsService(OffsetsSettings(3, 3), found, found, store, FakeController(found), peers)


def test_the_first_commit_creates_the_offsets_topic_then_commits_on_the_local_leader() -> None:
    async def scenario() -> None:
        found = directory(cluster_with_topic())
        store, peers = FakeStore(), FakePeers()
        service = offsets_service(found, store, peers)
        await service.commit_offsets("billing", [CommittedOffset("orders", 0, 12, "m")])
        assert OFFSETS_TOPIC in found.cluster.topics and found.cluster.topics[OFFSETS_TOPIC].internal
        ((group_id, operation),) = store.offsets_calls
        assert isinstance(operation, OffsetsCommit)
        assert operation.rows == (OffsetRow("orders", 0, 12, "m"),)
        assert found.cluster.group(group_id) is not None
        assert peers.calls == []

    asyncio.run(scenario())


def test_an_offsets_request_goes_to_the_remote_leader_and_follows_a_not_leader_hint() -> None:
    async def scenario() -> None:
        found = directory(cluster_with_topic())
        store, peers = FakeStore(), FakePeers()
        service = offsets_service(found, store, peers)
        await service.commit_offsets("g", [CommittedOffset("orders", 0, 1)])  # creates the topic locally
        store.offsets_calls.clear()
        for p in found.cluster.topics[OFFSETS_TOPIC].partitions:
            found.learn_leaders([LeaderAnnouncement(p.group_id, 2, 9)])
        rows = encode_offset_rows([OffsetRow("orders", 0, 5, "x", found.cluster.topics["orders"].created_ms)])
        peers.answers[RequestKind.OFFSETS] = [
            (STATUS_ERROR, encode_error(NotLeaderError("moved", leader_id=3))),
            (STATUS_OK, rows),
        ]
        found_offsets = await service.fetch_offsets("g", [("orders", 0)])
        assert found_offsets == [CommittedOffset("orders", 0, 5, "x", found.cluster.topics["orders"].created_ms)]
        assert [to for to, _, _ in peers.calls] == [2, 3]
        request = decode_offsets_request(peers.calls[1][2])
        assert request.operation == OffsetsFetch("g", (("orders", 0),))
        assert store.offsets_calls == []

    asyncio.run(scenario())


def test_offsets_are_checked_before_anything_is_sent() -> None:
    async def scenario() -> None:
        found = directory(cluster_with_topic())
        store, peers = FakeStore(), FakePeers()
        service = offsets_service(found, store, peers)
        with pytest.raises(InvalidArgumentError, match="group"):
            await service.commit_offsets("", [CommittedOffset("orders", 0, 1)])
        with pytest.raises(InvalidArgumentError, match="offset"):
            await service.commit_offsets("g", [CommittedOffset("orders", 0, -1)])
        with pytest.raises(InvalidArgumentError, match="metadata"):
            await service.commit_offsets("g", [CommittedOffset("orders", 0, 1, "m" * 5000)])
        with pytest.raises(UnknownTopicError):
            await service.commit_offsets("g", [CommittedOffset("nope", 0, 1)])
        assert await service.fetch_offsets("g", [("orders", 1)]) == [CommittedOffset("orders", 1, -1)]
        assert await service.list_groups() == ([], [])
        assert store.offsets_calls == [] and peers.calls == []

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("rows", "metadata", "limit"),
    [
        (700, "\x01" * 4096, "max_offsets_commit_bytes"),  # a 2.9 MB request, a 17.2 MB entry once JSON-escaped
        (4_100, "m" * 4096, "max_offsets_commit_bytes"),  # 16.8 MB: above what one log entry holds
        (10_001, "", "max_offsets_per_commit"),
    ],
    ids=["escaped-metadata", "many-rows-of-plain-metadata", "too-many-rows"],
)
def test_a_commit_whose_log_entry_would_be_too_large_is_refused_before_the_store_is_called(
    rows: int, metadata: str, limit: str
) -> None:
    async def scenario() -> None:
        found = directory(cluster_with_topic())
        store, peers = FakeStore(), FakePeers()
        service = offsets_service(found, store, peers)
        offsets = [CommittedOffset("orders", i % 2, i, metadata) for i in range(rows)]
        with pytest.raises(InvalidArgumentError, match=limit) as caught:
            await service.commit_offsets("g", offsets)
        assert caught.value.field == "offsets"
        assert store.offsets_calls == [] and peers.calls == []

        await service.commit_offsets("g", [CommittedOffset("orders", i % 2, i, "m" * 100) for i in range(4_096)])
        ((_, operation),) = store.offsets_calls
        assert isinstance(operation, OffsetsCommit) and len(operation.rows) == 4_096

    asyncio.run(scenario())


def test_the_offsets_commit_limits_are_node_config_keys_within_what_a_log_entry_holds() -> None:
    defaults = NodeConfig()
    assert OffsetsSettings(3, 3) == OffsetsSettings(
        3, 3, defaults.max_offsets_per_commit, defaults.max_offsets_commit_bytes
    )
    assert defaults.max_offsets_commit_bytes <= StorageConfig().max_entry_bytes - ENTRY_OVERHEAD_BYTES


# ----------------------------------------------------------------------------------------------- admin service


class NoMoves:
    async def moves(self) -> list[Any]:
        return []


class SilentController:
    """A moves source whose controller leader does not answer (MoveReporter raises then)."""

    async def moves(self) -> list[Any]:
        raise UnavailableError("the controller leader (node 2) did not say which moves are in flight within 2s")


def admin_service(
    found: Any, stat: FakeStatus | None = None, liveness: FakeLiveness | None = None, moves: Any = None
) -> AdminService:
    settings = AdminSettings("c1", default_partitions=2, default_replication_factor=3, max_topic_partitions=100)
    return AdminService(
        settings,
        found,
        found,
        liveness or FakeLiveness(),
        FakeController(found),
        stat or FakeStatus(),
        moves or NoMoves(),
    )


def test_create_topic_applies_defaults_waits_for_its_leaders_and_describes_it() -> None:
    async def scenario() -> None:
        found = directory(cluster_with_topic())
        service = admin_service(found)
        task = asyncio.ensure_future(service.create_topic("events", 0, 0, {"retention.ms": "1000"}))
        for _ in range(1000):  # bounded: until the controller (a fake) has applied the creation
            if "events" in found.cluster.topics:
                break
            await asyncio.sleep(0.001)
        topic = found.cluster.topics["events"]
        found.learn_leaders([LeaderAnnouncement(p.group_id, p.preferred_leader, 1) for p in topic.partitions])
        described = await task
        assert (len(described.partitions), described.replication_factor) == (2, 3)
        assert described.configs["retention.ms"] == "1000"
        assert [p.leader for p in described.partitions] == [p.preferred_leader for p in topic.partitions]

    asyncio.run(scenario())


def test_create_topic_refuses_bad_counts_without_asking_the_controller() -> None:
    async def scenario() -> None:
        found = directory(cluster_with_topic())
        service = admin_service(found)
        with pytest.raises(InvalidArgumentError, match="partitions"):
            await service.create_topic("t", 101, 3, {})
        with pytest.raises(InvalidArgumentError, match="replication_factor"):
            await service.create_topic("t", 1, -1, {})
        assert "t" not in found.cluster.topics

    asyncio.run(scenario())


def test_describe_cluster_counts_leaders_and_flags_partitions_short_of_in_sync_replicas() -> None:
    async def scenario() -> None:
        found = directory(cluster_with_topic("orders", partitions=2))
        p0, p1 = found.cluster.topics["orders"].partitions
        stat = FakeStatus({p0.group_id: status(p0.group_id, leader=2), p1.group_id: status(p1.group_id, isr=(1, 2))})
        described = await admin_service(found, stat, FakeLiveness({3: "dead"})).describe_cluster()
        assert described.under_replicated == (("orders", 1),)
        assert {node: leaders for node, _, leaders in described.loads} == {1: 1, 2: 1, 3: 0}
        assert [n.state for n in described.nodes] == ["alive", "alive", "dead"]
        assert (described.cluster_id, described.controller_id, described.partitions) == ("c1", 1, 2)
        assert described.moves == () and described.moves_error is None

    asyncio.run(scenario())


def test_describe_cluster_says_the_moves_are_unknown_when_the_controller_leader_does_not_answer() -> None:
    async def scenario() -> None:
        found = directory(cluster_with_topic("orders", partitions=2))
        described = await admin_service(found, moves=SilentController()).describe_cluster()
        assert described.moves == ()
        assert described.moves_error is not None and "did not say which moves" in described.moves_error
        assert [n.node_id for n in described.nodes] == [1, 2, 3], "the rest of the description stands"

    asyncio.run(scenario())


def test_drain_marks_the_node_draining_once_and_reports_what_is_left_on_it() -> None:
    async def scenario() -> None:
        found = directory(cluster_with_topic("orders", partitions=2))
        p0, p1 = found.cluster.topics["orders"].partitions
        stat = FakeStatus({p0.group_id: status(p0.group_id, leader=3), p1.group_id: status(p1.group_id, leader=1)})
        service = admin_service(found, stat)
        drained = await service.drain_node(3, force=True)
        assert found.cluster.nodes[3].state is ctl.NodeState.DRAINING
        assert (drained.replicas_left, drained.leaders_left, drained.safe_to_stop) == (2, 1, False)
        with pytest.raises(UnknownNodeError):
            await service.drain_node(9)
        with pytest.raises(UnknownNodeError):
            await service.remove_node(9)

    asyncio.run(scenario())


def test_a_drain_that_leaves_too_few_nodes_for_a_topic_is_refused_unless_forced_and_undrain_reverts_it() -> None:
    async def scenario() -> None:
        found = directory(cluster_with_topic("orders", partitions=2))  # replication factor 3 on 3 nodes
        service = admin_service(found)
        with pytest.raises(DrainRefusedError, match="orders"):
            await service.drain_node(2)
        assert found.cluster.nodes[2].state is ctl.NodeState.ACTIVE
        await service.drain_node(2, force=True)
        assert found.cluster.nodes[2].state is ctl.NodeState.DRAINING
        await service.undrain_node(2)
        await service.undrain_node(2)  # idempotent
        assert found.cluster.nodes[2].state is ctl.NodeState.ACTIVE
        with pytest.raises(UnknownNodeError):
            await service.undrain_node(9)

    asyncio.run(scenario())


def test_metadata_lists_user_topics_and_refuses_unknown_names() -> None:
    found = directory(cluster_with_topic())
    service = admin_service(found)
    nodes, topics = service.metadata([])
    assert [n.node_id for n in nodes] == [1, 2, 3]
    assert [t.name for t in topics] == ["orders"]
    with pytest.raises(UnknownTopicError):
        service.metadata(["orders", "missing"])


def test_the_admin_service_asks_the_controller_with_typed_commands() -> None:
    async def scenario() -> None:
        found = directory(cluster_with_topic())
        controller = FakeController(found)
        settings = AdminSettings("c1", 2, 3, 100)

        class NoMoves:
            async def moves(self) -> list[Any]:
                return []

        service = AdminService(settings, found, found, FakeLiveness(), controller, FakeStatus(), NoMoves())
        await service.alter_topic_configs("orders", {"retention.ms": "5"}, [])
        await service.delete_topic("orders")
        assert [type(c) for c in controller.calls] == [ctl.AlterTopicConfigs, ctl.DeleteTopic]
        assert not isinstance(controller.calls[0], CreateTopicRequest)

    asyncio.run(scenario())


def test_the_partitions_led_here_follow_their_views_leadership() -> None:
    """The leader broadcast asks this four times a second: kept as views change, never a walk over them."""
    found = directory(cluster_with_topic(partitions=3), node_id=1)
    views = [lead(found, "orders", p) for p in range(3)]
    assert found.led_here() == {v.group_id: 1 for v in views}
    first, second, third = views
    second.update(high_watermark=0, log_start_offset=0, leader_id=1, term=4, leader=True, current=True)
    first.update(high_watermark=0, log_start_offset=0, leader_id=2, term=2, leader=False, current=False)
    found.remove_view(third)
    assert found.led_here() == {second.group_id: 4}
    assert found.leader_of(second.group_id) == 1


def test_the_move_reporter_raises_when_the_controller_leader_does_not_answer_rather_than_saying_none() -> None:
    async def scenario() -> None:
        peers = FakePeers()  # no scripted answer: the controller leader (node 2) refuses the connection
        reporter = MoveReporter(1, lambda: 2, list, peers)
        with pytest.raises(UnavailableError, match=r"controller leader \(node 2\)"):
            await reporter.moves()
        assert await MoveReporter(1, lambda: 1, list, peers).moves() == []  # led here: asked locally

    asyncio.run(scenario())
