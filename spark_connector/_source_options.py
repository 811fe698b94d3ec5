"""The source's options (Kafka-source names), parsed and checked once, with errors that name the option.

Offsets travel as Kafka's JSON: ``{"topic": {"0": 42}}`` means "the next offset to read in topic/0 is 42";
in ``startingOffsets`` -2 means earliest and -1 latest, in ``endingOffsets`` -1 means latest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from multiraft import ConfigError
from spark_connector._options import CONNECTION_OPTIONS, check_names, lower_keys, parse_connection, positive_int
from spark_connector._security import KAFKA_PREFIXED, Security

__all__ = [
    "EARLIEST",
    "LATEST",
    "Offsets",
    "SOURCE_OPTIONS",
    "SourceOptions",
    "check_source_names",
    "parse_source_options",
    "offsets_to_json",
]

EARLIEST = -2
LATEST = -1

Offsets = dict[tuple[str, int], int]
"""Next offset to read per (topic, partition)."""

SOURCE_OPTIONS = (
    *CONNECTION_OPTIONS,
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "maxOffsetsPerTrigger",
    "failOnDataLoss",
    "includeHeaders",
    "minPartitions",
    "pollTimeoutMs",
    "fetchMaxBytes",
    "monitoringGroupId",
)
"""Every option the source takes, as users write them (Spark hands them over lower-cased or not)."""

_PASSED_BY_SPARK = ("path",)  # load(path): the source has no use for it

_NO_GROUP = (
    "the source keeps its offsets in Spark's checkpoint, not in a consumer group (to watch a query's progress "
    "and lag with `multiraft group describe GROUP`, set monitoringGroupId=GROUP)"
)

# Kafka names the user may try that we do not serve: say so rather than ignore them.
_UNSUPPORTED = {
    "endingtimestamp": "use endingOffsets",
    "endingoffsetsbytimestamp": "use endingOffsets",
    "kafka.bootstrap.servers": "the option is called bootstrap",
    "groupidprefix": _NO_GROUP,
    "kafka.group.id": _NO_GROUP,
    "minoffsetspertrigger": "not supported",
    "maxtriggerdelay": "not supported",
}


def check_source_names(options: Mapping[str, str]) -> None:
    """Refuse an option name the source does not take (a typo), suggesting the nearest known one."""
    check_names(
        options,
        SOURCE_OPTIONS,
        passed_by_spark=_PASSED_BY_SPARK,
        unsupported=_UNSUPPORTED,
        role="source",
        aliases=KAFKA_PREFIXED,
    )


@dataclass(frozen=True)
class SourceOptions:
    """Parsed options. ``starting`` / ``ending`` are ``"earliest"``, ``"latest"`` or per-partition offsets."""

    bootstrap: str
    connect_timeout_s: float
    request_timeout_s: float
    security: Security
    subscribe: tuple[str, ...] | None
    pattern: str | None
    assign: tuple[tuple[str, int], ...] | None
    starting: str | Offsets
    ending: str | Offsets
    starting_timestamp_ms: int | None
    starting_by_timestamp: Offsets | None
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    include_headers: bool
    min_partitions: int | None
    poll_timeout_s: float
    fetch_max_bytes: int
    monitoring_group_id: str | None = None
    """Streaming only: the group under which each finished micro-batch's end offsets are committed, for
    monitoring (``multiraft group describe``); never read back (Spark's checkpoint stays the truth)."""

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` belongs to the subscription (``assign`` lists partitions, not topics)."""
        if self.subscribe is not None:
            return topic in self.subscribe
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        assert self.assign is not None
        return any(t == topic for t, _ in self.assign)


def _bool(options: dict[str, str], key: str, name: str, default: bool) -> bool:
    text = options.get(key)
    if text is None:
        return default
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(name, f"must be true or false, got {text!r}")
    return value == "true"


def _json_object(text: str, name: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(name, f"is not valid JSON ({exc.msg}): {text!r}") from None
    if not isinstance(value, dict):
        raise ConfigError(name, f'must be a JSON object like {{"topic": {{"0": 42}}}}, got {text!r}')
    return value


def _partition_number(text: Any, name: str) -> int:
    try:
        partition = int(text)
    except (TypeError, ValueError):
        raise ConfigError(name, f"partition {text!r} is not a number") from None
    if partition < 0:
        raise ConfigError(name, f"partition {text!r} must be >= 0")
    return partition


def parse_offsets_json(text: str, name: str, *, allowed_special: tuple[int, ...]) -> Offsets:
    """``{"topic": {"0": 42}}`` -> ``{("topic", 0): 42}``; negative values must be in ``allowed_special``."""
    offsets: Offsets = {}
    for topic, partitions in _json_object(text, name).items():
        if not isinstance(partitions, dict):
            raise ConfigError(name, f"topic {topic!r} must map partitions to offsets, got {partitions!r}")
        for partition_text, offset in partitions.items():
            partition = _partition_number(partition_text, name)
            if not isinstance(offset, int) or isinstance(offset, bool):
                raise ConfigError(name, f"{topic}/{partition}: offset must be an integer, got {offset!r}")
            if offset < 0 and offset not in allowed_special:
                allowed = " or ".join(str(v) for v in allowed_special) or "no negative value"
                raise ConfigError(name, f"{topic}/{partition}: offset {offset} is not allowed (use >= 0, {allowed})")
            offsets[(topic, partition)] = offset
    return offsets


def offsets_to_json(offsets: Offsets) -> dict[str, dict[str, int]]:
    """Spark's offset dict: topics, then partitions as strings (JSON keys), sorted for stable output."""
    nested: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        nested.setdefault(topic, {})[str(partition)] = offset
    return nested


def offsets_from_json(nested: Mapping[str, Any]) -> Offsets:
    """The inverse of :func:`offsets_to_json` (for offsets Spark hands back)."""
    return {
        (topic, int(partition)): int(offset)
        for topic, partitions in nested.items()
        for partition, offset in partitions.items()
    }


def _timestamp_ms(text: str, name: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ConfigError(name, f"must be milliseconds since the epoch, got {text!r}") from None
    if value < 0:
        raise ConfigError(name, f"must be >= 0, got {text!r}")
    return value


def parse_source_options(raw: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Check every option once, on the driver; the error names the option that is wrong."""
    check_source_names(raw)
    options = lower_keys(raw)
    connection = parse_connection(options)

    chosen = [k for k in ("subscribe", "subscribepattern", "assign") if k in options]
    if len(chosen) != 1:
        raise ConfigError(
            "subscribe",
            "set exactly one of subscribe, subscribePattern or assign"
            + (f" (got {', '.join(chosen)})" if chosen else ""),
        )
    subscribe: tuple[str, ...] | None = None
    pattern: str | None = None
    assign: tuple[tuple[str, int], ...] | None = None
    if "subscribe" in options:
        subscribe = tuple(t.strip() for t in options["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise ConfigError("subscribe", "must name at least one topic (comma-separated)")
    elif "subscribepattern" in options:
        pattern = options["subscribepattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError("subscribePattern", f"is not a valid regular expression: {exc}") from None
    else:
        parsed = _json_object(options["assign"], "assign")
        pairs: list[tuple[str, int]] = []
        for topic, partitions in parsed.items():
            if not isinstance(partitions, list) or not partitions:
                raise ConfigError("assign", f'topic {topic!r} must map to a list of partitions, like {{"t": [0, 1]}}')
            pairs.extend((topic, _partition_number(p, "assign")) for p in partitions)
        assign = tuple(sorted(set(pairs)))

    starting: str | Offsets = "latest" if streaming else "earliest"
    if "startingoffsets" in options:
        text = options["startingoffsets"].strip()
        if text.lower() in ("earliest", "latest"):
            starting = text.lower()
        else:
            starting = parse_offsets_json(text, "startingOffsets", allowed_special=(EARLIEST, LATEST))
        if not streaming and (starting == "latest" or (isinstance(starting, dict) and LATEST in starting.values())):
            raise ConfigError("startingOffsets", "latest (or -1) is not allowed in a batch query: it reads nothing")

    ending: str | Offsets = "latest"
    if "endingoffsets" in options:
        if streaming:
            raise ConfigError("endingOffsets", "is for batch queries (spark.read) only")
        text = options["endingoffsets"].strip()
        if text.lower() == "latest":
            ending = "latest"
        elif text.lower() == "earliest":
            raise ConfigError("endingOffsets", "earliest is not allowed: it would read nothing")
        else:
            ending = parse_offsets_json(text, "endingOffsets", allowed_special=(LATEST,))

    starting_timestamp_ms = None
    if "startingtimestamp" in options:
        starting_timestamp_ms = _timestamp_ms(options["startingtimestamp"], "startingTimestamp")
    starting_by_timestamp = None
    if "startingoffsetsbytimestamp" in options:
        starting_by_timestamp = parse_offsets_json(
            options["startingoffsetsbytimestamp"], "startingOffsetsByTimestamp", allowed_special=()
        )

    max_offsets = positive_int(options, "maxoffsetspertrigger", "maxOffsetsPerTrigger")
    if max_offsets is not None and not streaming:
        raise ConfigError("maxOffsetsPerTrigger", "is for streaming queries (spark.readStream) only")
    monitoring_group_id = options.get("monitoringgroupid")
    if monitoring_group_id is not None:
        monitoring_group_id = monitoring_group_id.strip()
        if not monitoring_group_id:
            raise ConfigError("monitoringGroupId", "must name a consumer group")
        if not streaming:
            raise ConfigError("monitoringGroupId", "is for streaming queries (spark.readStream) only")
    poll_timeout_ms = positive_int(options, "polltimeoutms", "pollTimeoutMs") or 120_000
    fetch_max_bytes = positive_int(options, "fetchmaxbytes", "fetchMaxBytes") or 4 * 1024 * 1024
    return SourceOptions(
        bootstrap=connection.bootstrap,
        connect_timeout_s=connection.connect_timeout_s,
        request_timeout_s=connection.request_timeout_s,
        security=connection.security,
        subscribe=subscribe,
        pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        starting_timestamp_ms=starting_timestamp_ms,
        starting_by_timestamp=starting_by_timestamp,
        max_offsets_per_trigger=max_offsets,
        fail_on_data_loss=_bool(options, "failondataloss", "failOnDataLoss", True),
        include_headers=_bool(options, "includeheaders", "includeHeaders", False),
        min_partitions=positive_int(options, "minpartitions", "minPartitions"),
        poll_timeout_s=poll_timeout_ms / 1000,
        fetch_max_bytes=fetch_max_bytes,
        monitoring_group_id=monitoring_group_id,
    )
