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
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import crc32c

from storage import _format as fmt
from storage.errors import SegmentFileError

__all__ = ["SegmentFileInfo", "SEGMENT_FILE_MAGIC", "read_segment_file_info", "iter_segment_file_values"]

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
