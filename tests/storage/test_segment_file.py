"""Sealed segments exported as files and imported on another replica: checked, never half applied."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest

from storage import (
    CorruptionError,
    LogStore,
    SegmentFileError,
    SegmentNotFoundError,
    read_segment_file_info,
)
from tests.storage._helpers import SMALL, data


@pytest.fixture
def leader(tmp_path: Path) -> LogStore:
    store = LogStore.open(tmp_path / "leader", SMALL)
    log = store.log("t", 0)
    log.append([data(i, 1 + i // 25, timestamp_ms=1_000 + i) for i in range(1, 90)])
    store.sync()
    yield store
    store.close()


def test_a_replica_rebuilt_from_exported_segments_matches_the_leader(leader: LogStore, tmp_path: Path) -> None:
    source = leader.log("t", 0)
    sealed = [s for s in source.segments() if s.sealed]
    files = [source.export_segment(s.base_index, tmp_path / f"seg{s.base_index}") for s in sealed]
    assert [f.entry_count for f in files] == [s.entry_count for s in sealed]
    assert read_segment_file_info(files[0].path).crc == files[0].crc
    with LogStore.open(tmp_path / "follower", SMALL) as store:
        replica = store.log("t", 0)
        for file in files:
            replica.import_segment(file.path)
        last = sealed[-1].last_index
        assert replica.entries(1, last + 1) == source.entries(1, last + 1)
        assert [(s.base_index, s.last_index, s.size_bytes) for s in replica.segments()[:-1]] == [
            (s.base_index, s.last_index, s.size_bytes) for s in sealed
        ]
        replica.append(source.entries(last + 1, source.last_index() + 1))  # then the tail as usual
        store.sync()
        assert replica.read(0, 1 << 20).data == source.read(0, 1 << 20).data
        assert replica.offset_for_timestamp(1_050) == source.offset_for_timestamp(1_050)


def test_an_empty_replica_may_start_at_a_later_segment(leader: LogStore, tmp_path: Path) -> None:
    source = leader.log("t", 0)
    third = [s for s in source.segments() if s.sealed][2]
    info = source.export_segment(third.base_index, tmp_path / "seg")
    with LogStore.open(tmp_path / "follower", SMALL) as store:
        replica = store.log("t", 0)
        replica.import_segment(info.path)
        assert replica.first_index() == third.base_index
        assert replica.term(third.base_index - 1) == source.term(third.base_index - 1)
        assert replica.start_offset() == third.base_offset


@pytest.mark.parametrize("damage", ["flip", "truncate", "not a segment"])
def test_a_damaged_file_is_refused_and_nothing_is_imported(leader: LogStore, tmp_path: Path, damage: str) -> None:
    source = leader.log("t", 0)
    info = source.export_segment(1, tmp_path / "seg")
    raw = bytearray(info.path.read_bytes())
    if damage == "flip":
        raw[len(raw) // 2] ^= 1
    elif damage == "truncate":
        raw = raw[: len(raw) - 100]
    else:
        raw = bytearray(b"hello" * 100)
    info.path.write_bytes(raw)
    with LogStore.open(tmp_path / "follower", SMALL) as store:
        replica = store.log("t", 0)
        with pytest.raises(SegmentFileError):
            replica.import_segment(info.path)
        assert (replica.last_index(), len(replica.segments())) == (0, 1)


def test_a_forged_file_with_a_bad_entry_crc_is_refused_after_a_partial_write_is_undone(
    leader: LogStore, tmp_path: Path
) -> None:
    source = leader.log("t", 0)
    info = source.export_segment(1, tmp_path / "seg")
    raw = bytearray(info.path.read_bytes())
    raw[-200] ^= 1  # inside the last entry's payload
    struct.pack_into("<I", raw, len(raw) - 12, crc32c.crc32c(bytes(raw[:-20])))  # a "valid" file checksum
    info.path.write_bytes(raw)
    with LogStore.open(tmp_path / "follower", SMALL) as store:
        replica = store.log("t", 0)
        with pytest.raises(CorruptionError) as raised:
            replica.import_segment(info.path)
        assert raised.value.index == info.last_index
        assert (replica.last_index(), len(replica.segments())) == (0, 1)
        store.sync()
    with LogStore.open(tmp_path / "follower", SMALL) as store:
        assert store.log("t", 0).last_index() == 0


def test_a_segment_that_does_not_continue_the_log_is_refused(leader: LogStore, tmp_path: Path) -> None:
    source = leader.log("t", 0)
    second = [s for s in source.segments() if s.sealed][1]
    info = source.export_segment(second.base_index, tmp_path / "seg")
    with LogStore.open(tmp_path / "follower", SMALL) as store:
        replica = store.log("t", 0)
        replica.append([data(1), data(2)])
        with pytest.raises(SegmentFileError, match="does not continue"):
            replica.import_segment(info.path)
        assert replica.last_index() == 2


def test_only_sealed_segments_can_be_exported(leader: LogStore, tmp_path: Path) -> None:
    source = leader.log("t", 0)
    with pytest.raises(SegmentNotFoundError):
        source.export_segment(source.segments()[-1].base_index, tmp_path / "active")
    with pytest.raises(SegmentNotFoundError):
        source.export_segment(2, tmp_path / "middle")
    assert not (tmp_path / "active").exists()
