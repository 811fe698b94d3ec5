"""A consumer-group member in a process of its own, for the multi-process consumer-group tests and benchmark.

    python -m tests.integration.group_worker '<json settings>'

It subscribes to a topic in a group, and after each ``poll()`` writes what it processed, then commits its
positions (so a committed offset never passes a record no member processed). Every event is one JSON line
appended to ``settings["events"]`` (flushed at once, so a ``kill -9`` loses none that happened):

    {"e": "assign"|"revoke"|"lost", "member": ..., "gen": ..., "parts": [[topic, partition], ...], "t": ...}
    {"e": "owned", "member": ..., "gen": ..., "parts": [...]}   the whole assignment, whenever it changes
    {"e": "records", "member": ..., "gen": ..., "recs": [[partition, offset], ...], "t": ...}
    {"e": "count", "member": ..., "gen": ..., "n": ...}   instead of "records" when log_records is false
                                                          (a benchmark: it reads with poll_arrow)
    {"e": "commit", "member": ..., "gen": ..., "offsets": [[partition, offset], ...], "t": ...}
    {"e": "commit-refused", "member": ..., "gen": ..., "reason": ..., "t": ...}

With ``hold_file`` set the worker, after its first poll that returned records, waits (at most
``hold_max_s``) until that file exists before it commits: a test pauses it there (SIGSTOP), lets the group
move on, resumes it and checks that its commit is refused. The worker stops when ``stop_file`` exists or
after ``max_seconds``; it closes the consumer (leaving the group) unless killed.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

from multiraft import Consumer, MultiraftError, TopicPartition

_POLL_S = 0.2


class _Events:
    def __init__(self, path: str) -> None:
        self._file: TextIO = open(path, "a", buffering=1)

    def write(self, consumer: Consumer, event: str, **fields: Any) -> None:
        line = {"e": event, "member": consumer.member_id, "gen": consumer.generation, "t": time.time(), **fields}
        self._file.write(json.dumps(line) + "\n")
        self._file.flush()


def _parts(partitions: list[TopicPartition]) -> list[list[Any]]:
    return sorted([tp.topic, tp.partition] for tp in partitions)


def run(settings: dict[str, Any]) -> None:
    events = _Events(settings["events"])
    consumer = Consumer(
        settings["bootstrap"],
        group_id=settings["group"],
        group_instance_id=settings.get("instance"),
        session_timeout_s=settings.get("session_timeout_s", 3.0),
        heartbeat_interval_s=settings.get("heartbeat_interval_s", 0.5),
        max_poll_interval_s=settings.get("max_poll_interval_s", 60.0),
        partition_assignment_strategy=settings.get("strategy", "cooperative-sticky"),
        client_id=settings.get("client_id", "group-worker"),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_poll_records=settings.get("max_poll_records", 500),
    )

    def commit(reason: str, partitions: Iterable[TopicPartition]) -> None:
        offsets = {tp: consumer.position(tp) for tp in partitions}
        if not offsets:
            return
        try:
            consumer.commit(offsets)
        except MultiraftError as exc:
            events.write(consumer, "commit-refused", reason=exc.reason, message=exc.message, when=reason)
            return
        events.write(consumer, "commit", offsets=sorted([tp.partition, o] for tp, o in offsets.items()), when=reason)

    owned: tuple[int, list[list[Any]]] | None = None

    def note_ownership(c: Consumer) -> None:
        # The whole assignment of each generation (cooperative callbacks name only what changed).
        nonlocal owned
        now = (c.generation, _parts(list(c.assignment())))
        if now != owned:
            owned = now
            events.write(c, "owned", parts=now[1])

    def on_assign(c: Consumer, partitions: list[TopicPartition]) -> None:
        events.write(c, "assign", parts=_parts(partitions))
        note_ownership(c)

    def on_revoke(c: Consumer, partitions: list[TopicPartition]) -> None:
        events.write(c, "revoke", parts=_parts(partitions))
        commit("revoke", partitions)
        note_ownership(c)

    def on_lost(c: Consumer, partitions: list[TopicPartition]) -> None:
        events.write(c, "lost", parts=_parts(partitions))

    events.write(consumer, "subscribing")
    consumer.subscribe(settings["topic"], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    log_records = settings.get("log_records", True)
    stop_file = Path(settings["stop_file"])
    hold_file = Path(settings["hold_file"]) if settings.get("hold_file") else None
    deadline = time.monotonic() + settings.get("max_seconds", 300.0)
    try:
        while time.monotonic() < deadline and not stop_file.exists():
            try:
                if not log_records:  # a benchmark: Arrow tables, counted only
                    table = consumer.poll_arrow(_POLL_S)
                    note_ownership(consumer)
                    if table.num_rows:
                        events.write(consumer, "count", n=table.num_rows)
                        commit("poll", consumer.assignment())
                    continue
                records = consumer.poll(_POLL_S)
            except MultiraftError as exc:
                events.write(consumer, "poll-error", reason=exc.reason, message=exc.message)
                time.sleep(_POLL_S)
                continue
            note_ownership(consumer)
            if not records:
                continue
            events.write(consumer, "records", recs=[[r.partition, r.offset] for r in records])
            if hold_file is not None:
                events.write(consumer, "holding")
                _wait_for(hold_file, settings.get("hold_max_s", 120.0))
                hold_file = None
            commit("poll", consumer.assignment())
    finally:
        consumer.close()
        events.write(consumer, "closed")


def _wait_for(path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


if __name__ == "__main__":
    run(json.loads(sys.argv[1]))
