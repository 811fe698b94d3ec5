"""``multiraft consume TOPIC``: records to stdout as text, JSON lines or hex.

Where to start (``--from``):

* ``earliest`` / ``latest``: the log start / the high watermark of each partition;
* ``N`` (a bare integer): offset N in each partition; ``-N``: N records before the high watermark;
* ``@MS``: the first record whose timestamp is at or after MS milliseconds since the epoch;
* an ISO-8601 time (``2024-05-01T12:00:00Z``, ``2024-05-01``): the same; a time without a zone is UTC.

Without ``--from`` a group resumes at its committed offsets (the log start where it committed nothing); without
a group, reading starts at the log start.

JSON lines carry bytes (key, value, header values) as a string when they are valid UTF-8 and as
``{"base64": "..."}`` otherwise, so both kinds read back without guessing; absent ones are ``null``.
"""

from __future__ import annotations

import base64
import contextlib
import enum
import json
import re
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import IO, TYPE_CHECKING

import typer

from multiraft.tools.cli._options import (
    BootstrapOption,
    ClusterDirOption,
    TimeoutOption,
    bootstrap_addresses,
    client_tls,
    credentials,
    fail,
    open_admin,
    silence_stdout,
    unescape,
    with_tls_options,
)

if TYPE_CHECKING:
    from multiraft import Consumer, Record, TopicPartition

__all__ = [
    "consume",
    "Format",
    "FORMAT_DIRECTIVES",
    "parse_start",
    "json_bytes",
    "bytes_of_json",
    "record_json",
    "format_string_formatter",
]

Start = str | int | datetime

# --from START:END: START as --from takes it but an ISO time (whose colons would be ambiguous), END an offset
# --from P=OFFSET,P=OFFSET: where each named partition starts (an offset, or -N before its end)
_PER_PARTITION = re.compile(r"\d+=[+-]?\d+(?:,\d+=[+-]?\d+)*")
_RANGE = re.compile(r"(|earliest|latest|[+-]?\d+|@\d+):(\d+)", re.IGNORECASE)

_POLL_S = 0.5


class Format(enum.StrEnum):
    TEXT = "text"
    JSON = "json"
    HEX = "hex"


def parse_start(text: str) -> Start:
    """``--from``: ``"earliest"``, ``"latest"``, an int offset (negative: from the end), or a datetime (UTC)."""
    lowered = text.strip().lower()
    if lowered in ("earliest", "latest"):
        return lowered
    if re.fullmatch(r"-0+", lowered):  # not "0 records before the end": that is latest
        raise typer.BadParameter("-0 is ambiguous: use latest (the end) or 0 (offset 0)", param_hint="--from")
    if re.fullmatch(r"[+-]?\d+", lowered):
        return int(lowered)
    if re.fullmatch(r"@\d+", lowered):
        ms = int(lowered[1:])
        return datetime.fromtimestamp(ms // 1000, UTC) + timedelta(milliseconds=ms % 1000)
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise typer.BadParameter(
            f"{text!r} is not earliest, latest, an OFFSET, @MILLISECONDS or an ISO-8601 time", param_hint="--from"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def json_bytes(data: bytes | None) -> str | dict[str, str] | None:
    """Bytes in a JSON line: the text when valid UTF-8, else ``{"base64": ...}``; None stays null."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def record_json(record: Record) -> str:
    return json.dumps(
        {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "timestamp": record.timestamp_ms,
            "key": json_bytes(record.key),
            "value": json_bytes(record.value),
            "headers": [[key, json_bytes(value)] for key, value in record.headers],
        },
        ensure_ascii=False,
    )


def bytes_of_json(data: object, what: str) -> bytes | None:
    """The inverse of :func:`json_bytes`: a string (UTF-8), ``{"base64": ...}`` or null."""
    if data is None:
        return None
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, dict) and isinstance(data.get("base64"), str):
        return base64.b64decode(data["base64"], validate=True)
    raise ValueError(f'{what} must be a string, {{"base64": ...}} or null, not {json.dumps(data)}')


_DIRECTIVES = re.compile(r"%(.)", re.DOTALL)
FORMAT_DIRECTIVES = {
    "t": "topic",
    "p": "partition",
    "o": "offset",
    "k": "key",
    "v": "value",
    "h": "headers as KEY=VALUE,KEY=VALUE",
    "T": "timestamp, milliseconds since the epoch",
    "d": "timestamp, ISO-8601 UTC",
    "K": "key length in bytes (-1: no key)",
    "S": "value length in bytes (-1: no value)",
    "%": "a percent sign",
}


def format_string_formatter(template: str) -> Callable[[Record], bytes]:
    """kcat's and rpk's ``-f`` output format: ``%t %p %o %k %v %h %T %d %K %S %%``; backslash escapes
    (``\\n``, ``\\t``) work; nothing is added (end it with ``\\n`` for one record per line)."""
    text = unescape(template).decode("utf-8")
    parts: list[str | None] = []  # literal text, or None before each directive
    directives: list[str] = []
    position = 0
    for match in _DIRECTIVES.finditer(text):
        parts.append(text[position : match.start()])
        if match.group(1) not in FORMAT_DIRECTIVES:
            raise typer.BadParameter(
                f"unknown directive %{match.group(1)}; known: {' '.join('%' + d for d in FORMAT_DIRECTIVES)}",
                param_hint="--format",
            )
        directives.append(match.group(1))
        position = match.end()
    tail = text[position:].encode("utf-8")
    literals = [part.encode("utf-8") for part in parts if part is not None]

    def field(directive: str, record: Record) -> bytes:
        if directive == "k":
            return record.key or b""
        if directive == "v":
            return record.value or b""
        if directive == "h":
            return b",".join(key.encode() + b"=" + (value or b"") for key, value in record.headers)
        if directive == "K":
            return str(-1 if record.key is None else len(record.key)).encode()
        if directive == "S":
            return str(-1 if record.value is None else len(record.value)).encode()
        simple = {
            "t": record.topic,
            "p": record.partition,
            "o": record.offset,
            "T": record.timestamp_ms,
            "%": "%",
        }
        if directive == "d":
            return _iso_ms(record.timestamp_ms).encode()
        return str(simple[directive]).encode()

    def format_record(record: Record) -> bytes:
        out = bytearray()
        for literal, directive in zip(literals, directives, strict=True):
            out += literal
            out += field(directive, record)
        out += tail
        return bytes(out)

    return format_record


def _iso_ms(timestamp_ms: int) -> str:
    moment = datetime.fromtimestamp(timestamp_ms // 1000, UTC) + timedelta(milliseconds=timestamp_ms % 1000)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _text_formatter(
    as_hex: bool, separator: bytes, print_key: bool, print_offset: bool, print_timestamp: bool, print_headers: bool
) -> Callable[[Record], bytes]:
    def field(data: bytes | None) -> bytes:
        if data is None:
            return b""
        return data.hex().encode() if as_hex else data

    def format_record(record: Record) -> bytes:
        parts: list[bytes] = []
        if print_offset:
            parts.append(f"{record.partition}/{record.offset}".encode())
        if print_timestamp:
            parts.append(_iso_ms(record.timestamp_ms).encode())
        if print_key:
            parts.append(field(record.key))
        if print_headers:
            parts.append(b",".join(key.encode() + b"=" + field(value) for key, value in record.headers))
        parts.append(field(record.value))
        return separator.join(parts) + b"\n"

    return format_record


class _Run:
    """One consume: which partitions, where they end (without --follow), what was written and committed."""

    def __init__(self, consumer: Consumer, out: IO[bytes], group: str | None) -> None:
        self.consumer = consumer
        self.out = out
        self.group = group
        self.written = 0
        self.ends: dict[TopicPartition, int] = {}
        self.done: set[TopicPartition] = set()

    def finished(self) -> bool:
        for tp, end in self.ends.items():
            if tp not in self.done and self.consumer.position(tp) >= end:
                self.done.add(tp)
        return len(self.done) == len(self.ends)

    def write(self, records: list[Record], format_record: Callable[[Record], bytes], limit: int | None) -> None:
        from multiraft import TopicPartition

        chunk: list[bytes] = []
        next_offsets: dict[TopicPartition, int] = {}
        for record in records:
            tp = TopicPartition(record.topic, record.partition)
            end = self.ends.get(tp)
            if end is not None and record.offset >= end:  # arrived after we started: not ours without --follow
                self.done.add(tp)
                continue
            if limit is not None and self.written + len(chunk) >= limit:
                break
            chunk.append(format_record(record))
            next_offsets[tp] = record.offset + 1
        if chunk:
            self.out.write(b"".join(chunk))
            self.out.flush()
            self.written += len(chunk)
        if self.group is not None and next_offsets:  # only what reached stdout counts as consumed
            self.consumer.commit(next_offsets)


@with_tls_options
def consume(
    topic: str = typer.Argument(..., metavar="TOPIC", help="Topic to read."),
    from_: str | None = typer.Option(
        None,
        "--from",
        "--offset",
        "-o",
        help="earliest | latest | OFFSET | -N (N before the end) | @MILLISECONDS | ISO-8601 time; START:END reads "
        "offsets START to END-1 (START: earliest, latest, OFFSET, -N, @MS or nothing) and stops; P=OFFSET,P=OFFSET "
        "starts each named partition at its own offset (and reads only those).",
        show_default="the group's committed offsets, else earliest",
    ),
    partition: list[int] = typer.Option([], "--partition", "-p", min=0, help="Read only this partition (repeatable)."),
    group: str | None = typer.Option(
        None, "--group", "-g", help="Consumer group: resume at its committed offsets and commit what is printed."
    ),
    member_of: str | None = typer.Option(
        None,
        "-G",
        metavar="GROUP",
        help="kcat's -G: read as a member of GROUP, sharing the partitions with its other members (--group GROUP "
        "--follow).",
    ),
    follow: bool = typer.Option(
        False, "--follow", "-F", help="Keep waiting for new records (default: stop at the end seen at start)."
    ),
    max_records: int | None = typer.Option(None, "--max", "-n", min=1, help="Stop after this many records."),
    output_format: str = typer.Option(
        "text",
        "--format",
        "-f",
        metavar="text|json|hex|FORMAT",
        help="text, json (one object per line), hex, or a format string as kcat's and rpk's -f: "
        "'%p/%o %k=%v %h\\n' (%t %p %o %k %v %h %T %d %K %S %%; see docs/cli.md).",
    ),
    print_key: bool = typer.Option(False, "--print-key", help="text/hex: print the key before the value."),
    print_offset: bool = typer.Option(False, "--print-offset", help="text/hex: print PARTITION/OFFSET first."),
    print_timestamp: bool = typer.Option(False, "--print-timestamp", help="text/hex: print the ISO timestamp."),
    print_headers: bool = typer.Option(
        False, "--print-headers", help="text/hex: print the headers (KEY=VALUE,...) before the value."
    ),
    separator: str = typer.Option(
        "\\t", "--separator", help="text/hex: what goes between printed fields (backslash escapes work: \\t, \\n)."
    ),
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Print records of a topic on stdout, one per line; exit 0 at the end, 130 on Ctrl-C."""
    from multiraft import Consumer, TopicPartition

    if member_of is not None:
        if group is not None and group != member_of:
            raise typer.BadParameter("-G names the group already: drop --group", param_hint="-G")
        if partition:
            raise typer.BadParameter(
                "a member reads the partitions its group gives it: drop --partition", param_hint="-G"
            )
        group, follow = member_of, True
    end_offset: int | None = None
    if from_ is not None and (span := _RANGE.fullmatch(from_.strip())):
        if follow:
            raise typer.BadParameter("a START:END range ends; --follow does not", param_hint="--from")
        from_, end_offset = span.group(1) or "earliest", int(span.group(2))
    starts: dict[int, int] = {}  # --from P=OFFSET,...: a start per partition
    if from_ is not None and _PER_PARTITION.fullmatch(from_.strip()):
        starts = {int(p): int(o) for p, o in (item.split("=") for item in from_.strip().split(","))}
        if partition and set(partition) != set(starts):
            raise typer.BadParameter("name the same partitions in --partition as in --from", param_hint="--from")
        partition, from_ = sorted(starts), None
    start = parse_start(from_) if from_ is not None else None
    if start is None and group is None:
        start = "earliest"
    if "%" in output_format:
        format_record: Callable[[Record], bytes] = format_string_formatter(output_format)
    elif output_format == Format.JSON:
        format_record = lambda record: (record_json(record) + "\n").encode()  # noqa: E731
    elif output_format in (Format.TEXT, Format.HEX):
        format_record = _text_formatter(
            output_format == Format.HEX, unescape(separator), print_key, print_offset, print_timestamp, print_headers
        )
    else:
        raise typer.BadParameter(
            f"{output_format!r} is not text, json, hex or a format string with % directives", param_hint="--format"
        )
    addresses = bootstrap_addresses(bootstrap, cluster_dir)
    with open_admin(addresses, cluster_dir, timeout) as admin:
        count = len(admin.describe_topic(topic).partitions)
        wanted = sorted(set(partition)) if partition else list(range(count))
        missing = [p for p in wanted if p >= count]
        if missing:
            fail(
                f"topic {topic!r} has {count} partition{'' if count == 1 else 's'}, there is no partition {missing[0]} "
                "(UNKNOWN_PARTITION)"
            )
        ends = admin.list_offsets(topic, "latest", wanted)
        if end_offset is not None:
            ends = {p: min(end, end_offset) for p, end in ends.items()}
        earliest = admin.list_offsets(topic, "earliest", wanted) if isinstance(start, int) or starts else {}
    tps = [TopicPartition(topic, p) for p in wanted]
    positions = _exact_positions(topic, start, wanted, earliest, ends, follow) if isinstance(start, int) else {}
    for p, offset in starts.items():
        positions |= _exact_positions(topic, offset, [p], earliest, ends, follow)
    consumer = Consumer(
        addresses,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_poll_records=500,
        **credentials(cluster_dir),
        tls=client_tls(cluster_dir),
    )
    run = _Run(consumer, sys.stdout.buffer, group)
    try:
        if positions:
            consumer.assign(tps, start="latest")
            for tp in tps:
                consumer.seek(tp, positions[tp.partition])
        elif follow and not partition:
            consumer.subscribe(topic, start=start)  # follows partitions added while it runs
        else:
            consumer.assign(tps, start=start)
        if not follow:
            run.ends = {tp: ends[tp.partition] for tp in tps}
        _loop(run, format_record, max_records, follow, timeout)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except BrokenPipeError:  # `| head` closed the pipe: stop quietly
        silence_stdout()
    finally:
        with contextlib.suppress(Exception):
            consumer.close()
    if sys.stderr.isatty():
        print(f"consumed {run.written} record{'' if run.written == 1 else 's'} from {topic}", file=sys.stderr)


def _exact_positions(
    topic: str, start: int, partitions: list[int], earliest: dict[int, int], ends: dict[int, int], follow: bool
) -> dict[int, int]:
    """Where ``--from OFFSET`` (or ``-N``) starts in each partition.

    ``-N`` stops at the log start. An offset below the log start (retention dropped it) starts at the log
    start. An offset past the end is an error, unless ``--follow``: then, as kcat does (librdkafka's
    ``auto.offset.reset=largest``), the partition is followed from its end, with a note on stderr.
    """
    positions: dict[int, int] = {}
    beyond: list[str] = []
    for p in partitions:
        low, high = earliest[p], ends[p]
        if start < 0:
            positions[p] = max(low, high + start)
        elif start > high:
            beyond.append(f"{topic}/{p} ends at {high}")
            positions[p] = high
        else:
            if start < low:
                print(f"note: {topic}/{p} starts at {low} (older records were deleted); reading from there",
                      file=sys.stderr)  # fmt: skip
            positions[p] = max(low, start)
    if beyond and not follow:
        fail(
            f"offset {start} is past the end of the log: {', '.join(beyond)}; --from latest --follow waits for "
            "new records (OFFSET_OUT_OF_RANGE)"
        )
    if beyond:
        print(f"note: offset {start} is past the end ({', '.join(beyond)}); following from the end", file=sys.stderr)
    return positions


def _loop(
    run: _Run, format_record: Callable[[Record], bytes], max_records: int | None, follow: bool, stall_s: float
) -> None:
    """Poll until --max records, or (without --follow) every partition reached its end; a partition that
    stops making progress for ``stall_s`` is an error, not a hang."""
    last_progress = time.monotonic()
    positions: dict[TopicPartition, int] = {}
    while max_records is None or run.written < max_records:
        if not follow and run.finished():
            return
        remaining = None if max_records is None else max_records - run.written
        records = run.consumer.poll(timeout_s=_POLL_S, max_records=remaining)
        run.write(records, format_record, max_records)
        if follow:
            continue
        now_positions = {tp: run.consumer.position(tp) for tp in run.ends if tp not in run.done}
        if records or now_positions != positions:
            positions, last_progress = now_positions, time.monotonic()
        elif time.monotonic() - last_progress > stall_s:
            stuck = ", ".join(f"{tp.topic}/{tp.partition} at {offset}" for tp, offset in sorted(now_positions.items()))
            fail(f"no progress for {stall_s:.0f} s before the end of {stuck}")
