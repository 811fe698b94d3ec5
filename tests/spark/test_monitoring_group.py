"""``monitoringGroupId``: a streaming query commits each finished micro-batch's end offsets under a consumer
group, for ``multiraft group describe`` only (Spark's checkpoint stays the truth)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from multiraft import Admin, Producer, TopicPartition, UnknownMemberError
from spark_connector._source import MultiraftStreamReader, source_schema
from tests.cli._helpers import invoke, invoked
from tests.integration._helpers import Cluster

OPTIONS = {"bootstrap": "127.0.0.1:1", "subscribe": "events"}


class _RecordingAdmin:
    def __init__(self, refuse: bool = False) -> None:
        self.commits: list[tuple[str, dict[TopicPartition, int]]] = []
        self.refuse = refuse

    def commit_group_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        if self.refuse:
            raise UnknownMemberError("the group has members")
        self.commits.append((group, dict(offsets)))


def _reader(options: dict[str, str], admin: _RecordingAdmin) -> MultiraftStreamReader:
    reader = MultiraftStreamReader(options, source_schema(options))
    reader._admin = admin  # type: ignore[assignment]
    return reader


def test_a_finished_micro_batch_commits_its_end_offsets_under_the_monitoring_group() -> None:
    admin = _RecordingAdmin()
    reader = _reader({**OPTIONS, "monitoringGroupId": "etl"}, admin)
    reader.commit({"events": {"0": 42, "1": 7}})
    assert admin.commits == [("etl", {TopicPartition("events", 0): 42, TopicPartition("events", 1): 7})]


def test_without_the_option_nothing_is_committed() -> None:
    admin = _RecordingAdmin()
    _reader(dict(OPTIONS), admin).commit({"events": {"0": 42}})
    assert admin.commits == []


def test_a_refused_monitoring_commit_does_not_fail_the_query() -> None:
    reader = _reader({**OPTIONS, "monitoringGroupId": "etl"}, _RecordingAdmin(refuse=True))
    reader.commit({"events": {"0": 42}})  # logged, not raised: monitoring must never stop the query


def test_the_same_offsets_are_committed_once() -> None:
    admin = _RecordingAdmin()
    reader = _reader({**OPTIONS, "monitoringGroupId": "etl"}, admin)
    reader.commit({"events": {"0": 42}})
    reader.commit({"events": {"0": 42}})
    reader.commit({"events": {"0": 50}})
    assert [offsets for _, offsets in admin.commits] == [
        {TopicPartition("events", 0): 42},
        {TopicPartition("events", 0): 50},
    ]


def test_group_describe_shows_a_streaming_querys_progress(spark: Any, shared_cluster: Cluster, tmp_path: Path) -> None:
    bootstrap = shared_cluster.bootstrap
    shared_cluster.create_topic("watched", 2, 3)
    with Producer(bootstrap) as producer:
        producer.send_batch("watched", [b"x"] * 6, partition=0).result(30)
        producer.send_batch("watched", [b"y"] * 3, partition=1).result(30)
    query = (
        spark.readStream.format("multiraft")
        .option("bootstrap", bootstrap)
        .option("subscribe", "watched")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "5")
        .option("monitoringGroupId", "watched-etl")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180), "the AvailableNow query did not finish"
    with Admin(bootstrap) as admin:
        assert admin.group_offsets("watched-etl") == {TopicPartition("watched", 0): 6, TopicPartition("watched", 1): 3}
    payload = json.loads(invoked(invoke("group", "describe", "watched-etl", "--json", bootstrap=bootstrap)))
    assert payload["state"] == "Empty" and payload["lag"] == 0
    assert [(p["partition"], p["committed"], p["log_end_offset"]) for p in payload["partitions"]] == [
        (0, 6, 6),
        (1, 3, 3),
    ]
