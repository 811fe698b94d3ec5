"""The source's planning on the driver: which partitions a query reads, and from which offset to which.

A subscription must not silently read nothing: ``subscribe`` or ``assign`` naming a topic (or partition)
that does not exist fails the query when it is planned, with the names and the nearest existing topic. A
``subscribePattern`` that matches nothing is legitimate (a stream may wait for its topics, as Kafka's does);
the readers log it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import structlog

from multiraft import Admin, ConfigError, TopicInfo, UnknownTopicError
from spark_connector._options import missing_topics_error
from spark_connector._source_options import EARLIEST, LATEST, Offsets, SourceOptions
from spark_connector.errors import DataLossError

__all__ = [
    "Snapshot",
    "check_covers",
    "discover",
    "report_data_loss",
    "skip_lost",
    "split_limit",
    "starting_offsets",
]

log = structlog.get_logger(__name__)

_TIMESTAMP_TYPE_KEY = "message.timestamp.type"


@dataclass
class Snapshot:
    """The partitions a query reads now, with their log starts and high watermarks."""

    earliest: Offsets = field(default_factory=dict)
    latest: Offsets = field(default_factory=dict)
    timestamp_types: dict[str, int] = field(default_factory=dict)


def _timestamp_type(info: TopicInfo) -> int:
    return 1 if info.configs.get(_TIMESTAMP_TYPE_KEY) == "LogAppendTime" else 0


def _wanted(
    topics: Mapping[str, TopicInfo], options: SourceOptions, known: Collection[tuple[str, int]], check: bool
) -> dict[str, list[int]]:
    """The subscribed partitions that exist; with ``check``, a ``subscribe`` or ``assign`` naming what does
    not exist fails.

    ``known`` holds the partitions a running stream already reads: one of those that is gone (its topic was
    deleted) is the caller's data-loss case, not a typo.
    """
    known_topics = {topic for topic, _ in known}
    wanted: dict[str, list[int]] = {}
    if options.assign is not None:
        missing = {t for t, _ in options.assign if t not in topics and t not in known_topics}
        if missing and check:
            raise missing_topics_error("assign", missing, topics)
        for topic, partition in options.assign:
            info = topics.get(topic)
            if info is None:
                continue  # known (now gone), or not checked
            if partition >= len(info.partitions) and (topic, partition) not in known and check:
                raise ConfigError(
                    "assign",
                    f"partition {topic}/{partition} does not exist: topic {topic!r} has "
                    f"{len(info.partitions)} partitions (0 to {len(info.partitions) - 1})",
                )
            if partition < len(info.partitions):
                wanted.setdefault(topic, []).append(partition)
        return wanted
    if options.subscribe is not None:
        missing = {t for t in options.subscribe if t not in topics and t not in known_topics}
        if missing and check:
            raise missing_topics_error("subscribe", missing, topics)
    for name, info in sorted(topics.items()):
        # Internal topics (__consumer_offsets) are never matched by a pattern, as in Kafka.
        if not name.startswith("__") and options.matches(name):
            wanted[name] = [p.partition for p in info.partitions]
    return wanted


def discover(
    admin: Admin, options: SourceOptions, known: Collection[tuple[str, int]] = (), *, check: bool = True
) -> Snapshot:
    """List the subscribed partitions and ask their leaders for the log start and high watermark.

    With ``check``, a subscribed topic or assigned partition that does not exist (and is not in ``known``)
    fails with a :class:`ConfigError` naming the option, the missing names and the nearest existing topic.
    """
    topics = {info.name: info for info in admin.list_topics()}
    snapshot = Snapshot()
    for topic, partitions in _wanted(topics, options, known, check).items():
        try:
            earliest = admin.list_offsets(topic, "earliest", partitions)
            latest = admin.list_offsets(topic, "latest", partitions)
        except UnknownTopicError:
            continue  # deleted since it was listed
        for partition in partitions:
            snapshot.earliest[(topic, partition)] = earliest[partition]
            snapshot.latest[(topic, partition)] = latest[partition]
        snapshot.timestamp_types[topic] = _timestamp_type(topics[topic])
    return snapshot


def _offsets_for_time(admin: Admin, tps: Sequence[tuple[str, int]], times: Mapping[tuple[str, int], int]) -> Offsets:
    """First offset at or after each partition's time; the high watermark where no record is that late."""
    found: Offsets = {}
    by_query: dict[tuple[str, int], list[int]] = {}
    for topic, partition in tps:
        by_query.setdefault((topic, times[(topic, partition)]), []).append(partition)
    for (topic, when), partitions in by_query.items():
        offsets = admin.list_offsets(topic, when, partitions)
        missing = [p for p in partitions if offsets[p] < 0]
        if missing:
            offsets.update(admin.list_offsets(topic, "latest", missing))
        for partition in partitions:
            found[(topic, partition)] = offsets[partition]
    return found


def check_covers(given: Offsets, tps: Sequence[tuple[str, int]], name: str) -> None:
    """Like Kafka: a JSON offsets option names every partition the query reads, and only those."""
    missing = sorted(set(tps) - set(given))
    if missing:
        listed = ", ".join(f"{t}/{p}" for t, p in missing[:10])
        raise ConfigError(
            name, f"names no offset for {listed}: give one for every partition read (-2 earliest, -1 latest)"
        )
    extra = sorted(set(given) - set(tps))
    if extra:
        listed = ", ".join(f"{t}/{p}" for t, p in extra[:10])
        raise ConfigError(name, f"names partitions the query does not read (or that do not exist): {listed}")


def starting_offsets(admin: Admin, options: SourceOptions, snapshot: Snapshot) -> Offsets:
    tps = sorted(snapshot.latest)
    if options.starting_timestamp_ms is not None:
        return _offsets_for_time(admin, tps, dict.fromkeys(tps, options.starting_timestamp_ms))
    if options.starting_by_timestamp is not None:
        check_covers(options.starting_by_timestamp, tps, "startingOffsetsByTimestamp")
        return _offsets_for_time(admin, tps, options.starting_by_timestamp)
    if options.starting == "earliest":
        return dict(snapshot.earliest)
    if options.starting == "latest":
        return dict(snapshot.latest)
    assert isinstance(options.starting, dict)
    check_covers(options.starting, tps, "startingOffsets")
    special = {EARLIEST: snapshot.earliest, LATEST: snapshot.latest}
    return {tp: special[o][tp] if o in special else o for tp, o in options.starting.items()}


def report_data_loss(fail_on_data_loss: bool, message: str, **details: object) -> None:
    """Kafka's failOnDataLoss: stop with an error, or log a warning and go on."""
    if fail_on_data_loss:
        raise DataLossError(
            f"{message}. Set failOnDataLoss=false to skip the lost records and go on.",
            **details,
        )
    log.warning(f"{message}; skipping ahead (failOnDataLoss=false)", **details)


def skip_lost(options: SourceOptions, start: Offsets, earliest: Mapping[tuple[str, int], int]) -> Offsets:
    """Move starts that retention left behind up to the log start (or raise, per failOnDataLoss)."""
    moved = dict(start)
    for tp, offset in sorted(start.items()):
        log_start = earliest.get(tp)
        if log_start is not None and offset < log_start:
            topic, partition = tp
            report_data_loss(
                options.fail_on_data_loss,
                f"{topic}/{partition}: offsets {offset} to {log_start - 1} were deleted by retention before the "
                f"query read them (the log now starts at {log_start})",
                topic=topic,
                partition=partition,
                from_offset=offset,
                to_offset=log_start,
            )
            moved[tp] = log_start
    return moved


def split_limit(available: Mapping[tuple[str, int], int], limit: int) -> dict[tuple[str, int], int]:
    """Share ``limit`` records over partitions in proportion to their backlog (largest remainder), so that a
    batch holds exactly min(limit, backlog) records."""
    total = sum(available.values())
    if total <= limit:
        return dict(available)
    shares = {tp: n * limit // total for tp, n in available.items()}
    left = limit - sum(shares.values())
    by_remainder = sorted(available, key=lambda tp: (-(available[tp] * limit % total), tp))
    for tp in by_remainder[:left]:
        shares[tp] += 1
    return shares
