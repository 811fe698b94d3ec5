"""Options of the source and the sink that need no cluster and no SparkSession: a misspelt name is refused
with the right one, the timeouts are options, and a bootstrap nobody listens on fails on the driver at once,
saying so (issue 13: the connector hid all three)."""

from __future__ import annotations

import pytest

from multiraft import Admin, ConfigError, ConnectionFailedError
from spark_connector._sink import check_sink_target, parse_sink_options
from spark_connector._source import MultiraftBatchReader, MultiraftStreamReader, source_schema
from spark_connector._source_options import parse_source_options

CLOSED = "127.0.0.1:1"  # nothing listens on port 1 (binding it needs root)


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("startingOffset", "startingOffsets"),
        ("maxOffsetPerTrigger", "maxOffsetsPerTrigger"),
        ("subscibe", "subscribe"),
        ("failOnDataLos", "failOnDataLoss"),
        ("requestTimeout", "requestTimeoutMs"),
    ],
)
def test_a_misspelt_source_option_is_refused_naming_it_and_the_right_one(typo: str, meant: str) -> None:
    options = {"bootstrap": "127.0.0.1:7000", "subscribe": "events", typo: "1"}
    # schema() is what Spark asks in load(): the typo fails there, before any query runs.
    with pytest.raises(ConfigError, match=rf"^{typo}: unknown option: did you mean {meant}\?"):
        source_schema(options)
    with pytest.raises(ConfigError, match=rf"^{typo}: unknown option: did you mean {meant}\?"):
        parse_source_options(options, streaming=True)


@pytest.mark.parametrize(
    ("typo", "meant"),
    [("rowPerSend", "rowsPerSend"), ("sortRow", "sortRows"), ("topics", "topic"), ("lingerMsec", "linger_ms")],
)
def test_a_misspelt_sink_option_is_refused_naming_it_and_the_right_one(typo: str, meant: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{typo}: unknown option: did you mean {meant}\?"):
        parse_sink_options({"bootstrap": "127.0.0.1:7000", "topic": "t", typo: "1"})


def test_the_options_spark_itself_passes_are_accepted() -> None:
    # load(path) passes path; writeStream passes checkpointLocation and queryName (and path from start(path)).
    parse_source_options({"bootstrap": "h:1", "subscribe": "t", "path": "/x"}, streaming=False)
    source_schema({"bootstrap": "h:1", "subscribe": "t", "path": "/x"})
    parse_sink_options(
        {
            "bootstrap": "h:1",
            "topic": "t",
            "path": "/x",
            "checkpointlocation": "/c",
            "queryname": "q",
            "batchBytes": "9",
        }
    )


def test_timeouts_are_options_in_milliseconds() -> None:
    source = parse_source_options(
        {"bootstrap": "h:1", "subscribe": "t", "connectTimeoutMs": "250", "REQUESTTIMEOUTMS": "4000"}, streaming=True
    )
    assert (source.connect_timeout_s, source.request_timeout_s) == (0.25, 4.0)
    defaults = parse_source_options({"bootstrap": "h:1", "subscribe": "t"}, streaming=True)
    assert (defaults.connect_timeout_s, defaults.request_timeout_s) == (5.0, 30.0)
    sink = parse_sink_options({"bootstrap": "h:1", "connectTimeoutMs": "250", "requestTimeoutMs": "4000"})
    assert (sink.connection.connect_timeout_s, sink.connection.request_timeout_s) == (0.25, 4.0)
    assert sink.producer_settings() == {"request_timeout_s": 4.0}  # the tasks' producers wait as long
    with pytest.raises(ConfigError, match="requestTimeoutMs: give it or request_timeout_s, not both"):
        parse_sink_options({"bootstrap": "h:1", "requestTimeoutMs": "4000", "request_timeout_s": "4"})


@pytest.mark.parametrize(
    ("option", "value"),
    [("connectTimeoutMs", "0"), ("connectTimeoutMs", "soon"), ("requestTimeoutMs", "-5"), ("bootstrap", "nohost")],
)
def test_a_bad_timeout_or_bootstrap_is_refused_naming_the_option(option: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"^{option}: "):
        parse_source_options({"bootstrap": "h:1", "subscribe": "t", option: value}, streaming=True)
    with pytest.raises(ConfigError, match=f"^{option}: "):
        parse_sink_options({"bootstrap": "h:1", "topic": "t", option: value})


def test_a_closed_bootstrap_port_fails_planning_at_once_saying_so() -> None:
    """The driver gives up after connectTimeoutMs, not the client's 30 s request timeout, and says why."""
    options = {"bootstrap": CLOSED, "subscribe": "events", "connectTimeoutMs": "300"}
    message = r"no node reachable at 127\.0\.0\.1:1 \(connection refused\)"
    with pytest.raises(ConnectionFailedError, match=message):
        MultiraftBatchReader(options, source_schema({})).partitions()
    stream = MultiraftStreamReader(options, source_schema({}))
    try:
        with pytest.raises(ConnectionFailedError, match=message):
            stream.initialOffset()
    finally:
        stream.stop()
    # The sink checks on the driver too: a write does not wait in every task and every retry of it.
    with pytest.raises(ConnectionFailedError, match=message):
        check_sink_target(parse_sink_options({"bootstrap": CLOSED, "topic": "t", "connectTimeoutMs": "300"}))


def test_the_admin_client_gives_up_on_a_dead_bootstrap_after_its_connect_timeout() -> None:
    """The client keyword the driver relies on (multiraft.Admin(connect_timeout_s=...))."""
    with (
        pytest.raises(
            ConnectionFailedError, match=r"^no node reachable at 127\.0\.0\.1:1, 127\.0\.0\.1:2 \(connection refused\)$"
        ),
        Admin(f"{CLOSED},127.0.0.1:2", connect_timeout_s=0.3) as admin,
    ):
        admin.list_topics()


@pytest.mark.parametrize("kafka_name", ["kafka.group.id", "groupIdPrefix"])
def test_kafka_group_options_are_refused_pointing_to_monitoring_group_id(kafka_name: str) -> None:
    with pytest.raises(ConfigError, match="set monitoringGroupId=GROUP"):
        parse_source_options({"bootstrap": "h:1", "subscribe": "t", kafka_name: "g"}, streaming=True)


def test_monitoring_group_id_names_a_group_for_streaming_queries_only() -> None:
    options = parse_source_options({"bootstrap": "h:1", "subscribe": "t", "monitoringGroupId": " etl "}, streaming=True)
    assert options.monitoring_group_id == "etl"
    assert parse_source_options({"bootstrap": "h:1", "subscribe": "t"}, streaming=True).monitoring_group_id is None
    with pytest.raises(ConfigError, match=r"^monitoringGroupId: is for streaming queries"):
        parse_source_options({"bootstrap": "h:1", "subscribe": "t", "monitoringGroupId": "etl"}, streaming=False)
    with pytest.raises(ConfigError, match=r"^monitoringGroupId: must name a consumer group"):
        parse_source_options({"bootstrap": "h:1", "subscribe": "t", "monitoringgroupid": " "}, streaming=True)
