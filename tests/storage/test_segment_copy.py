"""Segment files copied between replicas in chunks: each chunk checked, resumable, adopted without re-encoding."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import crc32c
import pytest

from storage import (
    ChunkChecksumError,
    LogStore,
    SegmentFileError,
    SegmentFileInfo,
    SegmentFileReceiver,
    read_segment_file_chunk,
)
from tests.storage._helpers import SMALL, data

CHUNK = 1000


@pytest.fixture
def exported(tmp_path: Path) -> Iterator[tuple[LogStore, list[SegmentFileInfo]]]:
    store = LogStore.open(tmp_path / "leader", SMALL)
    log = store.log("t", 0)
    log.append([data(i, 1 + i // 30, timestamp_ms=1_000 + i) for i in range(1, 120)])
    store.sync()
    sealed = [s for s in log.segments() if s.sealed]
    assert len(sealed) >= 3
    (tmp_path / "export").mkdir()
    files = [log.export_segment(s.base_index, tmp_path / "export" / f"{s.base_index}.seg") for s in sealed]
    yield store, files
    store.close()


def copy(info: SegmentFileInfo, receiver: SegmentFileReceiver, *, max_chunks: int = 10_000) -> int:
    """Copy chunks from where the receiver stands; returns how many were written."""
    written = 0
    while not receiver.complete and written < max_chunks:
        chunk, crc = read_segment_file_chunk(info.path, receiver.received_bytes, CHUNK)
        receiver.write_chunk(receiver.received_bytes, chunk, crc)
        written += 1
    return written


def test_chunks_rebuild_the_file_and_the_replica_adopts_it_byte_for_byte(
    exported: tuple[LogStore, list[SegmentFileInfo]], tmp_path: Path
) -> None:
    leader, files = exported
    source = leader.log("t", 0)
    with LogStore.open(tmp_path / "follower", SMALL) as store:
        replica = store.log("t", 0)
        for info in files:
            receiver = SegmentFileReceiver(tmp_path / "in" / f"{info.base_index}.seg", info.file_bytes, info.crc)
            assert copy(info, receiver) == -(-info.file_bytes // CHUNK)
            got = receiver.finish()
            assert (got.crc, got.file_bytes) == (info.crc, info.file_bytes)
            assert got.path.read_bytes() == info.path.read_bytes()
            replica.import_segment(got.path)
        store.sync()
        last = files[-1].last_index
        assert replica.entries(1, last + 1) == source.entries(1, last + 1)
        end = files[-1].next_offset
        assert replica.read(0, 1 << 20, max_offset=end).data == source.read(0, 1 << 20, max_offset=end).data


def test_a_chunk_failing_its_checksum_is_rejected_and_nothing_of_it_is_written(
    exported: tuple[LogStore, list[SegmentFileInfo]], tmp_path: Path
) -> None:
    info = exported[1][0]
    receiver = SegmentFileReceiver(tmp_path / "in.seg", info.file_bytes, info.crc)
    chunk, crc = read_segment_file_chunk(info.path, 0, CHUNK)
    corrupt = bytes([chunk[0] ^ 1]) + chunk[1:]
    with pytest.raises(ChunkChecksumError):
        receiver.write_chunk(0, corrupt, crc)
    assert receiver.received_bytes == 0
    with pytest.raises(SegmentFileError, match="expected byte 0"):
        receiver.write_chunk(CHUNK, chunk, crc)  # chunks arrive in order only
    receiver.write_chunk(0, chunk, crc)  # fetched again: accepted
    copy(info, receiver)
    assert receiver.finish().crc == info.crc


def test_a_copy_resumes_from_its_last_verified_chunk_after_a_restart(
    exported: tuple[LogStore, list[SegmentFileInfo]], tmp_path: Path
) -> None:
    info = exported[1][0]
    target = tmp_path / "in.seg"
    first = SegmentFileReceiver(target, info.file_bytes, info.crc)
    assert copy(info, first, max_chunks=2) == 2
    partial = target.with_name("in.seg.partial")
    with partial.open("ab") as out:
        out.write(b"torn bytes of a write that was never recorded")  # a crash mid-chunk
    second = SegmentFileReceiver(target, info.file_bytes, info.crc)  # the restarted copier
    assert second.resumed_from == second.received_bytes == 2 * CHUNK
    assert partial.stat().st_size == 2 * CHUNK
    copy(info, second)
    assert second.finish().crc == info.crc
    assert target.read_bytes() == info.path.read_bytes()
    assert not partial.exists()
    assert SegmentFileReceiver(target, info.file_bytes, info.crc).complete  # nothing left to fetch


def test_progress_of_another_version_of_the_file_is_not_trusted(
    exported: tuple[LogStore, list[SegmentFileInfo]], tmp_path: Path
) -> None:
    info = exported[1][0]
    target = tmp_path / "in.seg"
    copy(info, SegmentFileReceiver(target, info.file_bytes, info.crc), max_chunks=2)
    other = SegmentFileReceiver(target, info.file_bytes, info.crc ^ 1)
    assert other.received_bytes == 0


def test_a_complete_file_that_differs_from_the_manifest_is_discarded(
    exported: tuple[LogStore, list[SegmentFileInfo]], tmp_path: Path
) -> None:
    first, second = exported[1][0], exported[1][1]
    # The source served a different (internally valid) file of the same size: every chunk checks out.
    receiver = SegmentFileReceiver(tmp_path / "in.seg", first.file_bytes, first.crc ^ 0x5A5A)
    data_bytes = first.path.read_bytes()
    receiver.write_chunk(0, data_bytes, crc32c.crc32c(data_bytes))
    with pytest.raises(SegmentFileError, match="expected"):
        receiver.finish()
    assert receiver.received_bytes == 0 and not (tmp_path / "in.seg").exists()
    assert second.crc != first.crc


def test_chunk_reads_past_the_end_return_what_is_left(exported: tuple[LogStore, list[SegmentFileInfo]]) -> None:
    info = exported[1][0]
    tail, crc = read_segment_file_chunk(info.path, info.file_bytes - 10, CHUNK)
    assert len(tail) == 10 and crc == crc32c.crc32c(tail)
    with pytest.raises(SegmentFileError):
        read_segment_file_chunk(info.path, -1, CHUNK)
