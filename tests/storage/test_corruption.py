"""Damaged files: detected with the file and index named, never served, and repaired to the longest valid
prefix of every log."""

from __future__ import annotations

import mmap
import random
import shutil
from pathlib import Path

import pytest

from storage import (
    CorruptionError,
    Entry,
    EntryKind,
    LogStore,
    StorageError,
    UnrepairableStoreError,
    check_store,
    repair_store,
    set_aside_store,
)
from tests.storage._helpers import SMALL, data

PARTITIONS = 3
ENTRIES = 80


def _marker(partition: int, index: int) -> bytes:
    return b"<%02d:%05d>" % (partition, index)


def _build(path: Path) -> dict[int, list[Entry]]:
    written: dict[int, list[Entry]] = {}
    with LogStore.open(path, SMALL) as store:
        for partition in range(PARTITIONS):
            log = store.log("events", partition)
            log.append([data(i, 1 + i // 40, value=_marker(partition, i) * 8) for i in range(1, ENTRIES + 1)])
            log.append([Entry(ENTRIES + 1, 3, EntryKind.CONTROL, 9_000, b"ctl")])
            written[partition] = log.entries(1, ENTRIES + 2)
    return written


def _flip(path: Path, at: int, mask: int = 0x40) -> None:
    with path.open("r+b") as raw:
        raw.seek(at)
        byte = raw.read(1)[0]
        raw.seek(at)
        raw.write(bytes([byte ^ mask]))


def _data_file(path: Path) -> Path:
    return path / "log.lmdb" / "data.mdb"


def test_a_flipped_payload_byte_is_reported_with_file_and_index_and_never_served(tmp_path: Path) -> None:
    written = _build(tmp_path)
    data_file = _data_file(tmp_path)
    position = data_file.read_bytes().index(_marker(1, 33))
    _flip(data_file, position + 2)
    with LogStore.open(tmp_path, SMALL) as store:
        log = store.log("events", 1)
        assert log.entries(1, 33) == written[1][:32]  # what comes before is intact
        with pytest.raises(CorruptionError) as raised:
            log.entries(30, 40)
        assert raised.value.index == 33 and raised.value.path == str(data_file)
        assert "data.mdb at index 33" in str(raised.value)
        with pytest.raises(CorruptionError):
            log.read(0, 1 << 20)
        assert store.log("events", 0).entries(1, ENTRIES + 2) == written[0]

    report = check_store(tmp_path)
    assert not report.ok
    assert [(p.log, p.index) for p in report.problems] == [("events/1", 33)]
    assert "CRC" in report.problems[0].message

    repaired = repair_store(tmp_path)
    assert [(d.log, d.first_index, d.last_index) for d in repaired.dropped] == [("events/1", 33, ENTRIES + 1)]
    assert repaired.damaged_copy is not None and Path(repaired.damaged_copy).exists()
    assert check_store(tmp_path).ok
    with LogStore.open(tmp_path, SMALL) as store:
        assert store.log("events", 1).entries(1, 33) == written[1][:32]
        assert store.log("events", 1).last_index() == 32
        for partition in (0, 2):
            assert store.log("events", partition).entries(1, ENTRIES + 2) == written[partition]
        store.log("events", 1).append([data(33, 2)])  # the replica goes on from there


def _truncate(data_file: Path, size: int) -> None:
    with data_file.open("r+b") as raw:
        raw.truncate(size)


def test_a_file_cut_inside_a_logs_data_is_refused_at_open_and_repaired_to_the_entries_before_the_cut(
    tmp_path: Path,
) -> None:
    written = _build(tmp_path)
    data_file = _data_file(tmp_path)
    with LogStore.open(tmp_path, SMALL) as store:  # opening writes nothing
        segments = store.log("events", 2).segments()
    # Cut the file from the page that holds a late entry of events/2: its segment and every page after it go.
    # Where LMDB put the directory of logs depends on which freed pages it could reuse (a reader still open
    # until garbage collection keeps some), so try a few entries for a cut that spares the directory.
    original = data_file.read_bytes()
    for entry in (70, 75, 79, 65, 60, 55, 50):
        cut = original.index(_marker(2, entry)) // mmap.PAGESIZE * mmap.PAGESIZE
        first_lost = next(s.base_index for s in segments if s.base_index <= entry <= s.last_index)
        _truncate(data_file, cut)
        report = check_store(tmp_path)
        spared = [c.last_good_index for c in report.logs][:2] == [ENTRIES + 1, ENTRIES + 1]
        if report.unrecoverable is None and spared:
            break
        data_file.write_bytes(original)  # check_store only reads; put the bytes back for the next try
    else:
        pytest.fail("no cut inside events/2 spared the directory of logs and the other two logs")

    with pytest.raises(CorruptionError, match="truncated") as raised:
        LogStore.open(tmp_path, SMALL)
    assert raised.value.path == str(data_file)

    report = check_store(tmp_path)
    assert report.unrecoverable is None
    assert any("beyond EOF" in message for message in report.structural_problems)
    problems = [p for log_check in report.logs for p in log_check.problems]
    assert [(p.path, p.log, p.index) for p in problems] == [(str(data_file), "events/2", first_lost)]
    assert f"{data_file} log events/2 index {first_lost}" in str(problems[0])
    assert [c.last_good_index for c in report.logs] == [ENTRIES + 1, ENTRIES + 1, first_lost - 1]

    repaired = repair_store(tmp_path)
    assert repaired.repaired
    assert [(d.log, d.first_index, d.last_index) for d in repaired.dropped] == [("events/2", first_lost, ENTRIES + 1)]
    assert "structural check" in repaired.dropped[0].reason
    assert repaired.damaged_copy is not None and Path(repaired.damaged_copy, "data.mdb").stat().st_size == cut
    assert check_store(tmp_path).ok
    with LogStore.open(tmp_path, SMALL) as store:
        log = store.log("events", 2)
        assert log.last_index() == first_lost - 1
        assert log.entries(1, first_lost) == written[2][: first_lost - 1]
        assert log.next_offset() == 3 * (first_lost - 1)  # offsets end where the kept entries end
        for partition in (0, 1):
            assert store.log("events", partition).entries(1, ENTRIES + 2) == written[partition]
        log.append([data(first_lost, 2)])  # the replica goes on from there; its leader sends the rest
        store.sync()


def test_a_file_cut_inside_the_directory_of_logs_is_refused_with_a_clear_error_and_left_unchanged(
    tmp_path: Path,
) -> None:
    _build(tmp_path)
    data_file = _data_file(tmp_path)
    _truncate(data_file, 2 * mmap.PAGESIZE)  # only LMDB's two meta pages are left
    before = data_file.read_bytes()
    with pytest.raises(CorruptionError, match="truncated"):
        LogStore.open(tmp_path, SMALL)
    report = check_store(tmp_path)
    assert report.unrecoverable == "the main database (the directory of logs) is damaged"
    with pytest.raises(UnrepairableStoreError, match="cannot repair") as raised:
        repair_store(tmp_path)
    assert "the directory of logs) is damaged. Set it aside" in str(raised.value)
    assert data_file.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.lmdb"]  # no staging or damaged copy left


def test_a_store_set_aside_is_kept_whole_and_the_next_open_starts_empty(tmp_path: Path) -> None:
    _build(tmp_path)
    data_file = _data_file(tmp_path)
    _truncate(data_file, 2 * mmap.PAGESIZE)
    before = data_file.read_bytes()
    aside = Path(set_aside_store(tmp_path))
    assert aside.parent == tmp_path and aside.name.startswith("log.lmdb.unrepairable-")
    assert (aside / "data.mdb").read_bytes() == before
    with LogStore.open(tmp_path, SMALL) as store:
        assert list(store.logs()) == []


def test_random_byte_flips_are_either_harmless_or_detected_and_repaired(tmp_path: Path) -> None:
    original = tmp_path / "original"
    written = _build(original)
    size = _data_file(original).stat().st_size
    rng = random.Random(11)
    outcomes = {"harmless": 0, "repaired": 0, "unrecoverable": 0}
    for trial in range(40):
        copy = tmp_path / f"trial{trial}"
        shutil.copytree(original, copy)
        _flip(_data_file(copy), rng.randrange(2 * 4096, size), mask=1 << rng.randrange(8))
        report = check_store(copy)  # never crashes, whatever the damage
        if report.ok:
            outcome = "harmless"
        else:
            try:
                repair_store(copy)
            except StorageError:
                outcomes["unrecoverable"] += 1
                continue
            outcome = "repaired"
            assert check_store(copy).ok
        outcomes[outcome] += 1
        with LogStore.open(copy, SMALL) as store:
            for partition in range(PARTITIONS):
                log = store.log("events", partition)
                kept = log.entries(log.first_index(), log.last_index() + 1)
                if outcome == "harmless":
                    assert kept == written[partition]
                else:
                    assert kept == written[partition][: len(kept)]
        shutil.rmtree(copy)
    assert outcomes["repaired"] >= 5, outcomes


def test_a_missing_store_is_reported_not_created(tmp_path: Path) -> None:
    report = check_store(tmp_path / "nothing")
    assert not report.ok and "no log store" in (report.unrecoverable or "")
    assert not (tmp_path / "nothing").exists()
