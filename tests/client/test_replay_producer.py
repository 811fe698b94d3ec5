"""Replay producers (``Producer(replay_key=..., replay_epoch=...)``): a second run that sends the same batches
under the same key and epoch writes nothing twice, against a real 3-node cluster; and their settings."""

from __future__ import annotations

from collections import Counter

import pytest

from multiraft import BatchMetadata, ConfigError, Producer, ProducerError, ProducerFencedError
from rpc.client._producer_ids import MAX_PRODUCER_EPOCH, replay_producer_id
from tests.integration._helpers import Cluster, fetch_all

pytestmark = pytest.mark.integration

PARTITIONS = 2
CALLS = 14  # 7 per partition, more than the 5 batches a leader remembers: the oldest come back "long ago"


def _calls(tag: str, calls: int = CALLS, per_call: int = 20) -> list[tuple[int, list[bytes]]]:
    """(partition, values) of each send_batch() call: the same list gives the same batches on every run."""
    return [(c % PARTITIONS, [b"%s:c%d:r%d" % (tag.encode(), c, r) for r in range(per_call)]) for c in range(calls)]


def _send(
    bootstrap: str, key: str, epoch: int, calls: list[tuple[int, list[bytes]]], topic: str
) -> list[list[BatchMetadata]]:
    with Producer(bootstrap, replay_key=key, replay_epoch=epoch, linger_ms=0) as producer:
        assert producer.producer_id == replay_producer_id(key)
        futures = [producer.send_batch(topic, values, partition=p) for p, values in calls]
        return [future.result(timeout=60) for future in futures]


def _stored(cluster: Cluster, topic: str) -> list[bytes]:
    return [value for p in range(PARTITIONS) for _, value in fetch_all(cluster.client, topic, p)]


def _expected(calls: list[tuple[int, list[bytes]]]) -> Counter[bytes]:
    return Counter(value for _, values in calls for value in values)


def test_replay_writes_nothing_twice(shared_cluster: Cluster) -> None:
    topic = "replay-same"
    shared_cluster.create_topic(topic, PARTITIONS, 3)
    calls = _calls("same")
    first = _send(shared_cluster.bootstrap, "job-1", 3, calls, topic)
    assert all(not m.duplicate and m.base_offset >= 0 for result in first for m in result)

    again = _send(shared_cluster.bootstrap, "job-1", 3, calls, topic)
    assert all(m.duplicate for result in again for m in result)
    # The leader remembers the last five batches of each partition: those answer with their offsets; older
    # ones were written "long ago" and come back with offsets unknown (-1).
    remembered = {(m.partition, m.base_offset) for result in first[-5 * PARTITIONS :] for m in result}
    for before, after in zip(first, again, strict=True):
        for b, a in zip(before, after, strict=True):
            if (b.partition, b.base_offset) in remembered:
                assert (a.base_offset, a.last_offset) == (b.base_offset, b.last_offset)
            else:
                assert (a.base_offset, a.last_offset) == (-1, -1)
    assert any(m.base_offset == -1 for result in again for m in result)
    assert Counter(_stored(shared_cluster, topic)) == _expected(calls)


def test_partial_run_then_full_replay_writes_each_batch_once(shared_cluster: Cluster) -> None:
    topic = "replay-partial"
    shared_cluster.create_topic(topic, PARTITIONS, 3)
    calls = _calls("partial", calls=12)
    _send(shared_cluster.bootstrap, "job-2", 0, calls[:7], topic)  # the first run "crashed" after 7 calls

    replay = _send(shared_cluster.bootstrap, "job-2", 0, calls, topic)
    assert [all(m.duplicate for m in result) for result in replay] == [True] * 7 + [False] * 5
    stored = _stored(shared_cluster, topic)
    assert Counter(stored) == _expected(calls)
    # Per partition, in the order the calls were made.
    for p in range(PARTITIONS):
        values = [v for _, v in fetch_all(shared_cluster.client, topic, p)]
        assert values == [v for q, vs in calls if q == p for v in vs]


def test_replay_after_a_run_whose_last_call_was_cut_short_writes_the_rest_once(shared_cluster: Cluster) -> None:
    """The first run's input ended early, in the middle of a call (a Spark task outliving its killed driver
    writes its last rows as a short run): the replay's whole call overlaps it and writes only its rest."""
    topic = "replay-cut-short"
    shared_cluster.create_topic(topic, PARTITIONS, 3)
    calls = _calls("cut", calls=12)
    cut = [*calls[:6], (calls[6][0], calls[6][1][:7])]  # call 6 ends after 7 of its 20 records
    _send(shared_cluster.bootstrap, "job-5", 0, cut, topic)

    replay = _send(shared_cluster.bootstrap, "job-5", 0, calls, topic)
    assert [m.duplicate for m in replay[6]] == [True, False]  # 7 records already there, 13 written now
    assert [m.record_count for m in replay[6]] == [7, 13]
    assert [all(m.duplicate for m in result) for i, result in enumerate(replay) if i != 6] == [True] * 6 + [False] * 5
    for p in range(PARTITIONS):
        values = [v for _, v in fetch_all(shared_cluster.client, topic, p)]
        assert values == [v for q, vs in calls if q == p for v in vs]


def test_lower_epoch_is_fenced_and_higher_epoch_starts_afresh(shared_cluster: Cluster) -> None:
    topic = "replay-epochs"
    shared_cluster.create_topic(topic, PARTITIONS, 3)
    first, second = _calls("e5", calls=2), _calls("e6", calls=2)
    _send(shared_cluster.bootstrap, "job-3", 5, first, topic)
    _send(shared_cluster.bootstrap, "job-3", 6, second, topic)  # same sequences, new epoch: new records

    with Producer(shared_cluster.bootstrap, replay_key="job-3", replay_epoch=5) as old:
        future = old.send_batch(topic, [b"zombie"], partition=0)
        with pytest.raises(ProducerFencedError):
            future.result(timeout=60)
        with pytest.raises(ProducerError):
            old.send_batch(topic, [b"zombie-2"], partition=0)
    assert Counter(_stored(shared_cluster, topic)) == _expected(first) + _expected(second)


def test_different_keys_are_independent(shared_cluster: Cluster) -> None:
    topic = "replay-keys"
    shared_cluster.create_topic(topic, PARTITIONS, 3)
    calls = _calls("keys", calls=3)
    for key in ("task-a", "task-b"):
        results = _send(shared_cluster.bootstrap, key, 0, calls, topic)
        assert not any(m.duplicate for result in results for m in result)
    assert Counter(_stored(shared_cluster, topic)) == _expected(calls) + _expected(calls)


def test_replay_ids_and_settings() -> None:
    ids = {replay_producer_id(f"spark:query:{p}") for p in range(1000)}
    assert len(ids) == 1000
    assert all(2**62 <= i < 2**63 for i in ids)  # never a controller id (they count up from 1); fits an i64
    assert replay_producer_id("a") == replay_producer_id("a")
    for bad in (-1, MAX_PRODUCER_EPOCH + 1, True, 1.5):
        with pytest.raises(ConfigError) as caught:
            Producer("127.0.0.1:1", replay_key="k", replay_epoch=bad)  # type: ignore[arg-type]
        assert caught.value.metadata["field"] == "replay_epoch"
    with pytest.raises(ConfigError):
        Producer("127.0.0.1:1", replay_key="k", idempotence=False)
    with pytest.raises(ConfigError):
        Producer("127.0.0.1:1", replay_key="")
    with pytest.raises(ConfigError):
        Producer("127.0.0.1:1", replay_epoch=3)
