"""Sealed segments as files: export on one replica, import on another.

A new or far-behind replica catches up by copying sealed segment files instead of replaying the log. The
file holds the entries exactly as stored (header, CRC and payload), so the partition's data is never
re-serialized. Layout, little-endian::

    magic    8 bytes   b"MRSEG\\x00v1"
    header   ``_HEADER``: base index, last index, term of base index - 1, base offset, next offset,
             first/max entry timestamp, max record timestamp, entry count, bytes of values, name length
    name     utf-8 ``<topic>/<partition>`` of the exporting log (informational)
    entries  entry count x (u32 value length, value as stored in the log)
    trailer  8 bytes b"MRSEGEND", u32 crc32c of every byte before the trailer, u64 file length

Import checks the file checksum first, then every entry's own CRC, index continuity and offsets.

Copying between replicas (:func:`read_segment_file_chunk` on the source, :class:`SegmentFileReceiver` on the
destination) moves the file in chunks, each with its own crc32c, and keeps a progress record beside the
partial file so that a copy interrupted by a dropped connection or a restart continues from its last
verified chunk.
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import crc32c

from storage import _format as fmt
from storage.errors import ChunkChecksumError, SegmentFileError

__all__ = [
    "SegmentFileInfo",
    "SEGMENT_FILE_MAGIC",
    "SegmentFileReceiver",
    "read_segment_file_info",
    "read_segment_file_chunk",
    "iter_segment_file_values",
]

SEGMENT_FILE_MAGIC = b"MRSEG\x00v1"
_TRAILER_MAGIC = b"MRSEGEND"
_HEADER = struct.Struct("<QQQqqqqqQQI")
_TRAILER = struct.Struct("<8sIQ")
_LENGTH = struct.Struct("<I")
_CHUNK = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class SegmentFileInfo:
    """What an exported segment file holds."""

    path: Path
    name: str
    base_index: int
    last_index: int
    prev_term: int
    base_offset: int
    next_offset: int
    first_timestamp_ms: int
    max_timestamp_ms: int
    max_record_timestamp_ms: int
    entry_count: int
    value_bytes: int
    file_bytes: int
    crc: int


def write_segment_file(
    out: BinaryIO, name: str, record: fmt.SegmentRecord, prev_term: int, values: Iterator[memoryview]
) -> tuple[int, int]:
    """Write a segment file from stored values; return (file bytes, crc)."""
    encoded_name = name.encode()
    head = SEGMENT_FILE_MAGIC + _HEADER.pack(
        record.base_index,
        record.last_index,
        prev_term,
        record.base_offset,
        record.next_offset,
        record.first_timestamp_ms,
        record.max_timestamp_ms,
        record.max_record_timestamp_ms,
        record.entry_count,
        record.size_bytes,
        len(encoded_name),
    )
    crc = crc32c.crc32c(head)
    crc = crc32c.crc32c(encoded_name, crc)
    out.write(head)
    out.write(encoded_name)
    written = len(head) + len(encoded_name)
    count = 0
    for value in values:
        length = _LENGTH.pack(len(value))
        crc = crc32c.crc32c(value, crc32c.crc32c(length, crc))
        out.write(length)
        out.write(value)
        written += len(length) + len(value)
        count += 1
    if count != record.entry_count:
        raise SegmentFileError(f"segment of {name} changed during export: {count} != {record.entry_count} entries")
    out.write(_TRAILER.pack(_TRAILER_MAGIC, crc, written + _TRAILER.size))
    return written + _TRAILER.size, crc


def read_segment_file_info(path: str | os.PathLike[str]) -> SegmentFileInfo:
    """Parse the header and trailer and verify the checksum of the whole file (streamed)."""
    file_path = Path(path)
    try:
        size = file_path.stat().st_size
        with file_path.open("rb") as raw:
            head = raw.read(len(SEGMENT_FILE_MAGIC) + _HEADER.size)
            if len(head) < len(SEGMENT_FILE_MAGIC) + _HEADER.size or not head.startswith(SEGMENT_FILE_MAGIC):
                raise SegmentFileError(f"{file_path}: not a segment file")
            fields = _HEADER.unpack_from(head, len(SEGMENT_FILE_MAGIC))
            name_length = fields[-1]
            if size < len(head) + name_length + _TRAILER.size:
                raise SegmentFileError(f"{file_path}: truncated ({size} bytes)")
            name_bytes = raw.read(name_length)
            crc = crc32c.crc32c(name_bytes, crc32c.crc32c(head))
            remaining = size - len(head) - name_length - _TRAILER.size
            while remaining > 0:
                chunk = raw.read(min(_CHUNK, remaining))
                if not chunk:
                    raise SegmentFileError(f"{file_path}: truncated")
                crc = crc32c.crc32c(chunk, crc)
                remaining -= len(chunk)
            magic, stored_crc, stored_length = _TRAILER.unpack(raw.read(_TRAILER.size))
    except OSError as exc:
        raise SegmentFileError(f"cannot read {file_path}: {exc}") from exc
    if magic != _TRAILER_MAGIC or stored_length != size:
        raise SegmentFileError(f"{file_path}: bad trailer (truncated or not a segment file)")
    if stored_crc != crc:
        raise SegmentFileError(f"{file_path}: checksum mismatch (file is corrupt)")
    try:
        name = name_bytes.decode()
    except UnicodeDecodeError as exc:
        raise SegmentFileError(f"{file_path}: bad name") from exc
    (base_index, last_index, prev_term, base_offset, next_offset, first_ts, max_ts, max_record_ts, count,
     value_bytes, _) = fields  # fmt: skip
    if count != last_index - base_index + 1 or base_index < 1 or next_offset < base_offset:
        raise SegmentFileError(f"{file_path}: inconsistent header")
    return SegmentFileInfo(
        file_path, name, base_index, last_index, prev_term, base_offset, next_offset, first_ts, max_ts,
        max_record_ts, count, value_bytes, size, crc,
    )  # fmt: skip


def iter_segment_file_values(info: SegmentFileInfo) -> Iterator[tuple[int, bytes]]:
    """(index, stored value) of each entry; lengths are checked against the file."""
    encoded_name_length = len(info.name.encode())
    end = info.file_bytes - _TRAILER.size
    try:
        with info.path.open("rb") as raw:
            raw.seek(len(SEGMENT_FILE_MAGIC) + _HEADER.size + encoded_name_length)
            position = raw.tell()
            for index in range(info.base_index, info.last_index + 1):
                length_bytes = raw.read(_LENGTH.size)
                if len(length_bytes) != _LENGTH.size:
                    raise SegmentFileError(f"{info.path}: truncated at entry {index}")
                (length,) = _LENGTH.unpack(length_bytes)
                position += _LENGTH.size + length
                if length < fmt.ENTRY_HEADER_SIZE or position > end:
                    raise SegmentFileError(f"{info.path}: bad length for entry {index}")
                value = raw.read(length)
                if len(value) != length:
                    raise SegmentFileError(f"{info.path}: truncated at entry {index}")
                yield index, value
            if position != end:
                raise SegmentFileError(f"{info.path}: {end - position} unexpected bytes after the last entry")
    except OSError as exc:
        raise SegmentFileError(f"cannot read {info.path}: {exc}") from exc


def read_segment_file_chunk(path: str | os.PathLike[str], offset: int, length: int) -> tuple[bytes, int]:
    """``length`` bytes (fewer at the end) of an exported segment file from ``offset``, and their crc32c."""
    if offset < 0 or length < 1:
        raise SegmentFileError(f"bad chunk range: offset {offset}, length {length}")
    try:
        with Path(path).open("rb") as raw:
            raw.seek(offset)
            data = raw.read(length)
    except OSError as exc:
        raise SegmentFileError(f"cannot read {path}: {exc}") from exc
    return data, crc32c.crc32c(data)


class SegmentFileReceiver:
    """A segment file arriving in chunks at ``path``; resumable across restarts.

    Chunks are appended to ``<path>.partial`` in order. After each chunk the data is fsynced, then the
    number of verified bytes is written to ``<path>.progress`` (atomically, by rename): after a crash,
    whatever the partial file holds past that count is cut off, so resuming never trusts unsynced bytes.
    :meth:`finish` verifies the whole file against the expected size and checksum and renames it to ``path``.
    """

    def __init__(self, path: str | os.PathLike[str], expected_bytes: int, expected_crc: int) -> None:
        self.path = Path(path)
        self.expected_bytes = expected_bytes
        self.expected_crc = expected_crc
        self._partial = self.path.with_name(self.path.name + ".partial")
        self._progress = self.path.with_name(self.path.name + ".progress")
        self.received_bytes = 0
        self.resumed_from = 0
        if self.path.exists():
            self.received_bytes = self.resumed_from = expected_bytes
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            verified = self._read_progress()
            with self._partial.open("ab") as out:
                # Bytes past the last recorded chunk may be torn (written, not synced): cut them off.
                out.truncate(verified)
                out.flush()
                os.fsync(out.fileno())
        except OSError as exc:
            raise SegmentFileError(f"cannot prepare {self._partial}: {exc}") from exc
        self.received_bytes = self.resumed_from = verified

    def _read_progress(self) -> int:
        try:
            document = json.loads(self._progress.read_bytes())
        except (OSError, ValueError):
            return 0
        if (
            not isinstance(document, dict)
            or document.get("expected_bytes") != self.expected_bytes
            or document.get("expected_crc") != self.expected_crc
        ):
            return 0  # progress of another version of this file: start again
        verified = int(document.get("bytes", 0))
        try:
            on_disk = self._partial.stat().st_size
        except OSError:
            return 0
        return verified if 0 <= verified <= min(on_disk, self.expected_bytes) else 0

    @property
    def complete(self) -> bool:
        return self.received_bytes >= self.expected_bytes

    def write_chunk(self, offset: int, data: bytes, crc: int) -> None:
        """Append a chunk that must start at :attr:`received_bytes`; a checksum mismatch writes nothing."""
        if offset != self.received_bytes:
            raise SegmentFileError(f"{self.path}: chunk at byte {offset}, expected byte {self.received_bytes}")
        if crc32c.crc32c(data) != crc:
            raise ChunkChecksumError(f"{self.path}: chunk at byte {offset} ({len(data)} bytes) fails its checksum")
        if not data or offset + len(data) > self.expected_bytes:
            raise SegmentFileError(f"{self.path}: chunk at byte {offset} of {len(data)} bytes overruns the file")
        try:
            with self._partial.open("r+b") as out:
                out.seek(offset)
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            self.received_bytes = offset + len(data)
            document = {
                "bytes": self.received_bytes,
                "expected_bytes": self.expected_bytes,
                "expected_crc": self.expected_crc,
            }
            temporary = self._progress.with_name(self._progress.name + ".tmp")
            temporary.write_bytes(json.dumps(document).encode())
            temporary.replace(self._progress)
        except OSError as exc:
            raise SegmentFileError(f"cannot write {self._partial}: {exc}") from exc

    def finish(self) -> SegmentFileInfo:
        """Verify the complete file (size, trailer checksum, expected checksum) and move it into place."""
        if self.path.exists():
            info = read_segment_file_info(self.path)
        else:
            if not self.complete:
                raise SegmentFileError(f"{self.path}: {self.received_bytes} of {self.expected_bytes} bytes received")
            try:
                info = read_segment_file_info(self._partial)
            except SegmentFileError:
                self.discard()  # every chunk passed its checksum, so the source itself is bad: start over
                raise
            try:
                self._partial.replace(self.path)
                self._progress.unlink(missing_ok=True)
            except OSError as exc:
                raise SegmentFileError(f"cannot move {self._partial} into place: {exc}") from exc
            info = dataclasses.replace(info, path=self.path)
        if info.crc != self.expected_crc or info.file_bytes != self.expected_bytes:
            self.discard()
            raise SegmentFileError(
                f"{self.path}: got {info.file_bytes} bytes with crc {info.crc:#010x}, expected "
                f"{self.expected_bytes} bytes with crc {self.expected_crc:#010x}"
            )
        return info

    def discard(self) -> None:
        """Remove the file and its progress (a later copy starts from byte 0)."""
        self.received_bytes = 0
        for path in (self.path, self._partial, self._progress):
            path.unlink(missing_ok=True)
