"""DeleteRecords (rpk topic trim-prefix) on a 3-node cluster of real processes: the new log start offset is
replicated, survives a follower's restart and a leader change, and reads below it are out of range."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from multiraft import Admin
from multiraft.errors import OffsetOutOfRangeError
from multiraft.tools.launcher import cluster_down, load_cluster
from rpc.proto import multiraft_pb2 as pb
from storage import LogStore, decode_batches
from tests.integration._helpers import Cluster, produce, record_values

pytestmark = pytest.mark.integration

TOPIC = "trimmed"
BATCHES, RECORDS = 40, 5  # offsets 0..199, over several 4 KiB segments
TRIM = 123  # inside a batch (120..124): the segment holding it straddles the new start


def _fetch(cluster: Cluster, offset: int) -> pb.FetchResponse:
    request = pb.FetchRequest(topic=TOPIC, partition=0, offset=offset, max_bytes=1 << 20)
    return cluster.client.call_leader(TOPIC, 0, lambda stub, timeout: stub.Fetch(request, timeout=timeout))


def _assert_trimmed_reads(cluster: Cluster) -> None:
    with pytest.raises(OffsetOutOfRangeError) as raised:
        _fetch(cluster, 0)
    assert raised.value.metadata["log_start_offset"] == str(TRIM)
    response = _fetch(cluster, TRIM)
    assert response.log_start_offset == TRIM
    offsets = decode_batches(response.batches).column("offset").to_pylist()
    assert TRIM in offsets and offsets[-1] >= TRIM
    assert cluster.describe(TOPIC).partitions[0].log_start_offset == TRIM


def test_deleted_records_stay_deleted_on_every_replica_through_a_restart_and_a_leader_change(
    cluster: Cluster,
) -> None:
    cluster.create_topic(TOPIC, partitions=1, replication_factor=3, segment_bytes="4096")
    for sequence in range(BATCHES):
        produce(cluster.client, TOPIC, 0, record_values(0, sequence, 0, RECORDS))
    admin = Admin(cluster.client)
    high_watermark = BATCHES * RECORDS

    with pytest.raises(OffsetOutOfRangeError, match=f"beyond the high watermark {high_watermark}"):
        admin.delete_records({(TOPIC, 0): high_watermark + 1})
    assert admin.delete_records({(TOPIC, 0): TRIM}) == {(TOPIC, 0): TRIM}
    assert admin.delete_records({(TOPIC, 0): 50}) == {(TOPIC, 0): TRIM}  # already deleted: nothing moves back

    leader = cluster.leader(TOPIC, 0)
    follower = next(n for n in cluster.describe(TOPIC).partitions[0].replicas if n != leader)
    cluster.kill(follower)
    cluster.start(follower)
    _assert_trimmed_reads(cluster)

    cluster.kill(leader)
    cluster.leader(TOPIC, 0, timeout_s=30, other_than=leader)
    deadline = time.monotonic() + 30
    for _ in range(300):  # the new leader answers once it has committed an entry of its term
        try:
            _assert_trimmed_reads(cluster)
            break
        except (AssertionError, OffsetOutOfRangeError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    assert produce(cluster.client, TOPIC, 0, record_values(0, BATCHES, 0, RECORDS)) == high_watermark
    cluster.start(leader)  # it applied the trim before it was killed: its store must still say so

    # Every replica keeps the new start, and dropped the segments wholly below it (not the straddling one).
    directory = cluster.info.directory
    cluster_down(directory)
    for node_id, node in load_cluster(directory).nodes.items():
        with LogStore.open(Path(node.directory) / "data") as store:
            log = store.log(TOPIC, 0, create=False)
            assert log.attribute("partition.trimmed_to") == str(TRIM).encode(), f"node {node_id}"
            assert 0 < log.start_offset() <= TRIM, f"node {node_id} holds {TOPIC}/0 from {log.start_offset()}"
