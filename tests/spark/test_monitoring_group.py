"""``monitoringGroupId``: a streaming query commits each finished micro-batch's end offsets under a consumer
group, for ``multiraft group describe`` only (Spark's checkpoint stays the truth)."""

from __future__ import annotations

from collections.abc import Mapping

from multiraft.client import TopicPartition, UnknownMemberError
from spark_connector._source import MultiraftStreamReader, source_schema

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
