"""``multiraft produce TOPIC``: one record per input line, from stdin or a file."""

from __future__ import annotations

import contextlib
import enum
import io
import json
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

from multiraft.tools.cli._common import err_console
from multiraft.tools.cli._input_format import format_string_parser
from multiraft.tools.cli._options import (
    BootstrapOption,
    ClusterDirOption,
    bootstrap_addresses,
    client_tls,
    count,
    credentials,
    describe_error,
    fail,
    silence_stdout,
    unescape,
    with_tls_options,
)
from multiraft.tools.cli._topic import key_values

if TYPE_CHECKING:
    from multiraft import Producer, RecordMetadata

__all__ = ["produce", "Compression", "InputFormat"]

_PROGRESS_EVERY_BYTES = 256 * 1024
_READ_BYTES = 1 << 20
_MAX_PENDING = 100_000  # --verbose keeps futures to print offsets in input order; bound how many


class Compression(enum.StrEnum):
    NONE = "none"
    ZSTD = "zstd"
    LZ4 = "lz4"


class InputFormat(enum.StrEnum):
    TEXT = "text"
    JSON = "json"


def _json_record(
    line: bytes, extra_headers: list[tuple[str, bytes]]
) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int | None]:
    """Key, value, headers and timestamp of a line of ``consume --format json`` (topic, partition and offset
    are where it was, not where it goes: ignored)."""
    from multiraft.tools.cli._consume import bytes_of_json

    try:
        document = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(exc.msg) from exc
    if not isinstance(document, dict):
        raise ValueError("not an object")
    headers = list(extra_headers)
    raw_headers = document.get("headers") or []
    pairs = raw_headers.items() if isinstance(raw_headers, dict) else raw_headers
    for pair in pairs:
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and isinstance(pair[0], str)):
            raise ValueError(f"a header must be [name, value], not {json.dumps(pair)}")
        headers.append((pair[0], bytes_of_json(pair[1], "a header value") or b""))
    timestamp = document.get("timestamp")
    if timestamp is not None and (not isinstance(timestamp, int) or isinstance(timestamp, bool)):
        raise ValueError("timestamp must be milliseconds since the epoch")
    return bytes_of_json(document.get("key"), "key"), bytes_of_json(document.get("value"), "value"), headers, timestamp


class _Tally:
    """Acknowledgements counted from the producer's callback threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.acknowledged = 0
        self.failed = 0
        self.first_error: BaseException | None = None

    def __call__(self, metadata: RecordMetadata | None, error: BaseException | None) -> None:
        with self._lock:
            if error is None:
                self.acknowledged += 1
            else:
                self.failed += 1
                if self.first_error is None:
                    self.first_error = error


def _lines(stream: io.BufferedIOBase, delimiter: bytes = b"\n") -> Iterator[tuple[bytes, int]]:
    """Each line without its line ending (``\\n`` or ``\\r\\n``; or up to a one-byte ``delimiter``), and how
    many input bytes it took.

    Reads with ``read1``: big chunks from a file (few system calls, so the producer's threads keep the GIL
    less often), but a line typed on a terminal is sent as soon as it is entered.
    """
    partial: list[bytes] = []  # a line longer than one chunk
    strip_cr = delimiter == b"\n"
    while chunk := stream.read1(_READ_BYTES):
        if delimiter not in chunk:
            partial.append(chunk)
            continue
        lines = chunk.split(delimiter)
        if partial:
            lines[0] = b"".join([*partial, lines[0]])
            partial.clear()
        partial.append(lines.pop())
        for line in lines:
            yield (line[:-1] if strip_cr and line.endswith(b"\r") else line), len(line) + 1
    last = b"".join(partial)
    if last:
        yield (last[:-1] if strip_cr and last.endswith(b"\r") else last), len(last)


def _human_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def _print_offset(future: Future[RecordMetadata]) -> None:
    error = future.exception()
    if error is None:
        metadata = future.result()
        sys.stdout.write(f"{metadata.partition}/{metadata.offset}\n")
    else:
        reason = getattr(error, "reason", type(error).__name__)
        sys.stdout.write(f"failed ({reason})\n")


_WAIT_NOTE_S = 2.0


def _flush(producer: Producer, tally: _Tally, records: int, topic: str, timeout_s: float) -> None:
    """Wait for every record's acknowledgement (each fails after ``timeout_s``), saying on stderr what it
    waits for every few seconds."""
    from multiraft.errors import RequestTimeoutError

    give_up = time.monotonic() + timeout_s + 30.0  # a record fails by its delivery timeout well before this
    while True:
        try:
            producer.flush(timeout_s=_WAIT_NOTE_S)
            return
        except RequestTimeoutError:
            if time.monotonic() > give_up:
                return  # close() fails what is left
            waiting = records - tally.acknowledged - tally.failed
            print(
                f"waiting for {count(waiting, 'record')} to be acknowledged by {topic} (each fails after "
                f"--timeout {timeout_s:g} s)",
                file=sys.stderr,
            )


@with_tls_options
def produce(
    topic: str = typer.Argument(..., metavar="TOPIC", help="Topic to write to."),
    file: Path | None = typer.Option(
        None, "--file", "-f", exists=True, dir_okay=False, readable=True, help="Read lines from this file, not stdin."
    ),
    key_separator: str | None = typer.Option(
        None,
        "--key-separator",
        "-K",
        help="Text before the first SEP on a line is the record key, the rest its value (\\t is a tab).",
    ),
    header: list[str] = typer.Option([], "--header", "-H", help="A header KEY=VALUE on every record (repeatable)."),
    partition: int | None = typer.Option(
        None, "--partition", "-p", min=0, help="Write every record to this partition (default: by key, or spread)."
    ),
    compression: Compression = typer.Option(Compression.NONE, "--compression", help="Batch compression."),
    linger_ms: int = typer.Option(5, "--linger-ms", min=0, help="How long to wait to fill a batch [ms]."),
    delimiter: str = typer.Option(
        "\\n",
        "--delimiter",
        "-D",
        help="The one byte that ends each record in the input, as kcat's -D (\\n, also \\r\\n; \\0, \\t or any "
        "character): records may then hold newlines.",
    ),
    input_format: InputFormat = typer.Option(
        InputFormat.TEXT,
        "--format",
        help="text: one value per line (-K splits off a key); json: one object per line as `consume --format "
        'json` prints them (key, value, headers, timestamp; bytes as text or {"base64": ...}).',
    ),
    record_format: str | None = typer.Option(
        None,
        "--input-format",
        help="What each input line holds, as rpk produce's -f: %k key, %v value, %h headers (name=value,...), "
        "%T timestamp [ms], %p partition, %% a percent sign; other text stands as written (e.g. '%k\\t%v').",
    ),
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="Print PARTITION/OFFSET of each record, in input order, on stdout."
    ),
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            min=0.1,
            help="Seconds to deliver each record, retries included (and to wait for each request).",
            rich_help_panel="Connection",
        ),
    ] = 30.0,
) -> None:
    """Write one record per line of stdin (or --file), then print a summary on stderr.

    --timeout bounds each record's delivery (retries included). Exits 1 with one line on stderr if any record
    was not acknowledged; at the first failure it stops reading the input and says so.
    """
    from multiraft import Producer

    headers = [(key, value.encode()) for key, value in key_values(header, "--header").items()]
    if key_separator is not None and input_format is InputFormat.JSON:
        raise typer.BadParameter("a JSON record carries its own key", param_hint="-K")
    if record_format is not None and (key_separator is not None or input_format is InputFormat.JSON):
        raise typer.BadParameter("the format string says where the key is (no -K, no --format json)")
    parse_line = format_string_parser(record_format) if record_format is not None else None
    if key_separator is not None and not key_separator:
        raise typer.BadParameter("an empty separator would make every line a key with no value", param_hint="-K")
    separator = unescape(key_separator) if key_separator else None
    record_delimiter = unescape(delimiter)
    if len(record_delimiter) != 1:
        raise typer.BadParameter(f"{delimiter!r} is not one byte", param_hint="--delimiter")
    tally = _Tally()
    pending: deque[Future[RecordMetadata]] = deque()
    records = read_bytes = 0
    started = time.monotonic()
    interrupted = False
    skipped = False  # input left unsent after the first failure
    bad_line = ""  # --format json or --input-format: why the input stopped
    total_bytes = file.stat().st_size if file is not None else 0
    show_progress = file is not None and err_console.is_terminal
    progress = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
        disable=not show_progress,
    )
    producer = Producer(
        bootstrap_addresses(bootstrap, cluster_dir),
        compression=compression.value,
        linger_ms=linger_ms,
        request_timeout_s=timeout,
        delivery_timeout_s=timeout,  # --timeout bounds each record's delivery, retries included
        **credentials(cluster_dir),
        tls=client_tls(cluster_dir),
    )
    try:
        with contextlib.ExitStack() as stack:
            stream = (
                stack.enter_context(file.open("rb")) if file is not None else cast(io.BufferedIOBase, sys.stdin.buffer)
            )
            stack.enter_context(progress)
            task = progress.add_task(f"producing to {topic}", total=total_bytes or None)
            shown = 0
            lines = _lines(stream, record_delimiter)
            for line, size in lines:
                key: bytes | None = None
                value: bytes | None = line
                record_headers = headers
                timestamp: int | None = None
                record_partition = partition
                if parse_line is not None:
                    try:
                        key, value, record_headers, timestamp, given = parse_line(line, headers)
                    except ValueError as exc:
                        bad_line = f"line {records + 1} does not match --input-format: {exc}"
                        break
                    record_partition = given if given is not None else partition
                elif input_format is InputFormat.JSON:
                    try:
                        key, value, record_headers, timestamp = _json_record(line, headers)
                    except ValueError as exc:
                        bad_line = f"line {records + 1} is not a JSON record: {exc}"
                        break
                elif separator is not None:
                    key, found, rest = line.partition(separator)
                    if found:
                        value = rest
                    else:  # no separator on this line: all of it is the value
                        key, value = None, line
                future = producer.send(
                    topic,
                    value,
                    key=key,
                    headers=record_headers or None,
                    partition=record_partition,
                    timestamp=timestamp,
                    callback=tally,
                )
                records += 1
                read_bytes += size
                if verbose:
                    pending.append(future)
                    while pending and (pending[0].done() or len(pending) > _MAX_PENDING):
                        _print_offset(pending.popleft())
                if tally.failed:  # exit 1 is certain now; do not send (or re-resolve a bad topic for) the rest
                    skipped = next(lines, None) is not None
                    break
                if read_bytes - shown >= _PROGRESS_EVERY_BYTES:
                    progress.update(task, completed=read_bytes)
                    shown = read_bytes
            progress.update(task, completed=read_bytes)
            _flush(producer, tally, records, topic, timeout)
        while pending:
            _print_offset(pending.popleft())
        sys.stdout.flush()
    except KeyboardInterrupt:
        interrupted = True
        print(f"interrupted after {count(records, 'record')} had been sent", file=sys.stderr)
        raise typer.Exit(130) from None
    except BrokenPipeError:  # --verbose into `| head`: stop reading input, say how far it got
        silence_stdout()
        fail(f"stdout was closed after {count(records, 'record')} had been sent; the rest of the input was not read")
    finally:
        with contextlib.suppress(Exception):  # what did not make it is counted in the tally
            producer.close(timeout_s=2.0 if interrupted else timeout)
    seconds = time.monotonic() - started
    if bad_line:
        sent = tally.acknowledged
        fail(
            f"{bad_line} (the input stopped there; {count(sent, 'record')} before it "
            f"{'was' if sent == 1 else 'were'} sent)"
        )
    unacknowledged = records - tally.acknowledged
    if unacknowledged:
        error = tally.first_error
        first = describe_error(error) if error is not None else "not acknowledged before the producer closed"
        note = f"; stopped at the first failure: the input after line {records} was not sent" if skipped else ""
        fail(f"{unacknowledged} of {count(records, 'record')} failed; first: {first}{note}")
    rate = records / seconds if seconds > 0 else 0.0
    print(
        f"produced {records} record{'' if records == 1 else 's'} ({_human_bytes(read_bytes)}) to {topic} "
        f"in {seconds:.2f} s ({rate:,.0f} records/s)",
        file=sys.stderr,
    )
