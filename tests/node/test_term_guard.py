"""The terms each replica reached, recorded outside the log store, and what a replica rebuilt from them does."""

from __future__ import annotations

import errno
import os
import random
import struct
from pathlib import Path
from typing import Any

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiraft import raft
from multiraft.node.replicas.raft_log import RaftLogStorage
from multiraft.node.scheduler.term_guard import TERMS_FILE, TermGuard
from multiraft.node.threads import ThreadOwner
from storage import LogStore, StorageConfig, StorageFullError, encode_batch


def _guard(directory: Path) -> TermGuard:
    owner = ThreadOwner("scheduler")
    owner.bind()
    return TermGuard.open(directory, owner)


def test_recorded_terms_survive_a_restart_and_only_a_rising_term_writes(tmp_path: Path) -> None:
    guard = _guard(tmp_path)
    assert guard.floor(7) == 0 and not (tmp_path / TERMS_FILE).exists()
    guard.record({7: 3, 0: 12})
    guard.record({7: 3, 0: 11})  # nothing rose
    guard.record({9: 0})
    assert guard.writes == 1
    guard.record({7: 4})
    reopened = _guard(tmp_path)
    assert (reopened.floor(7), reopened.floor(0), reopened.floor(9)) == (4, 12, 0)
    assert sorted(p.name for p in tmp_path.iterdir()) == [TERMS_FILE]  # no staging file left behind


@given(terms=st.dictionaries(st.integers(0, 2**63 - 1), st.integers(1, 2**63 - 1), max_size=50), bit=st.integers(0))
def test_any_recorded_terms_round_trip_and_any_flipped_bit_is_refused(
    tmp_path_factory: pytest.TempPathFactory, terms: dict[int, int], bit: int
) -> None:
    directory = tmp_path_factory.mktemp("guard")
    _guard(directory).record(terms)
    if not terms:
        return
    assert {group: _guard(directory).floor(group) for group in terms} == terms
    path = directory / TERMS_FILE
    raw = bytearray(path.read_bytes())
    raw[(bit // 8) % len(raw)] ^= 1 << (bit % 8)
    path.write_bytes(bytes(raw))
    damaged = _guard(directory)
    assert all(damaged.floor(group) == 0 for group in terms)
    assert [p.name.startswith(f"{TERMS_FILE}.damaged-") for p in directory.iterdir()] == [True]


@pytest.mark.parametrize("content", [b"", b"MRTG", b"MRTG\x01\x00\x00\x00" + b"\xff" * 8 + b"\x00" * 4, b"x" * 100])
def test_a_damaged_or_lying_file_is_set_aside_and_ignored(tmp_path: Path, content: bytes) -> None:
    (tmp_path / TERMS_FILE).write_bytes(content)
    assert _guard(tmp_path).floor(1) == 0
    assert not (tmp_path / TERMS_FILE).exists()


def test_a_full_disk_refuses_the_record_as_full_and_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    guard = _guard(tmp_path)
    guard.record({1: 2})

    def no_room(fd: int, data: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", no_room)
    with pytest.raises(StorageFullError, match="no room to record Raft terms"):
        guard.record({1: 3})
    monkeypatch.undo()
    assert guard.floor(1) == 2 and _guard(tmp_path).floor(1) == 2


def test_a_released_group_stays_released_across_a_restart_until_reclaimed(tmp_path: Path) -> None:
    guard = _guard(tmp_path)
    guard.record({7: 3, 8: 2})
    guard.release(7)
    guard.release(7)  # already released: nothing written
    assert guard.writes == 2
    reopened = _guard(tmp_path)
    assert reopened.released(7) and not reopened.released(8) and reopened.floor(7) == 3
    reopened.reclaim(7)
    again = _guard(tmp_path)
    assert not again.released(7) and again.floor(7) == 3 and again.floor(8) == 2


def test_a_group_released_before_it_ever_raised_a_term_is_kept(tmp_path: Path) -> None:
    guard = _guard(tmp_path)
    guard.release(4)
    reopened = _guard(tmp_path)
    assert reopened.released(4) and reopened.floor(4) == 0


def test_a_version_1_file_is_read(tmp_path: Path) -> None:
    body = struct.pack("<4sIQ", b"MRTG", 1, 2) + struct.pack("<QQ", 3, 9) + struct.pack("<QQ", 5, 1)
    (tmp_path / TERMS_FILE).write_bytes(body + struct.pack("<I", crc32c.crc32c(body)))
    guard = _guard(tmp_path)
    assert (guard.floor(3), guard.floor(5), guard.released(3)) == (9, 1, False)


def test_a_record_with_unknown_flags_sets_the_file_aside(tmp_path: Path) -> None:
    body = struct.pack("<4sIQ", b"MRTG", 2, 1) + struct.pack("<QQI", 3, 9, 6)
    (tmp_path / TERMS_FILE).write_bytes(body + struct.pack("<I", crc32c.crc32c(body)))
    assert _guard(tmp_path).floor(3) == 0
    assert not (tmp_path / TERMS_FILE).exists()


# ------------------------------------------------------------------------- replicas held to the record


@pytest.fixture
def store(tmp_path: Path) -> Any:
    opened = LogStore.open(tmp_path / "store", StorageConfig(segment_bytes=64 << 10))
    yield opened
    opened.close()


def test_a_replica_that_lost_its_whole_log_neither_votes_nor_campaigns_until_it_holds_a_later_term(
    store: LogStore,
) -> None:
    storage = RaftLogStorage(store.log("t", 0), term_floor=7)
    assert storage.amnesiac
    hard_state, _ = storage.initial_state()
    assert (hard_state.term, hard_state.vote) == (7, raft.UNKNOWN_VOTE)
    assert storage.recover_until() == (1, 8)  # durable: a restart before it is back keeps it
    assert RaftLogStorage(store.log("t", 0), term_floor=7).recover_until() == (1, 8)
    storage.append([raft.Entry(1, 7, raft.EntryKind.DATA, 1, encode_batch([b"x"], timestamps_ms=1))])
    assert not storage.recovered()
    storage.append([raft.Entry(2, 8, raft.EntryKind.DATA, 2, encode_batch([b"y"], timestamps_ms=1))])
    assert storage.recovered()


def test_a_replica_placed_again_after_its_node_released_it_is_a_new_replica_that_forgot_only_its_vote(
    store: LogStore,
) -> None:
    storage = RaftLogStorage(store.log("t", 2), term_floor=7, released=True)
    assert not storage.amnesiac and storage.recover_until() == (0, 0)
    hard_state, _ = storage.initial_state()
    assert (hard_state.term, hard_state.vote) == (7, raft.UNKNOWN_VOTE)  # never a second vote in term 7


def test_a_replica_whose_stored_term_fell_behind_the_record_only_forgets_its_vote(store: LogStore) -> None:
    log = store.log("t", 1)
    first = RaftLogStorage(log)
    first.append([raft.Entry(1, 2, raft.EntryKind.DATA, 1, encode_batch([b"x"], timestamps_ms=1))])
    first.set_hard_state(raft.HardState(2, 3, 1))
    storage = RaftLogStorage(log, term_floor=5)  # the term record went to disk, the store's round did not
    assert not storage.amnesiac and storage.recover_until() == (0, 0)
    assert storage.initial_state()[0] == raft.HardState(5, raft.UNKNOWN_VOTE, 1)
    assert RaftLogStorage(log, term_floor=2).initial_state()[0] == raft.HardState(2, 3, 1)  # the record is no higher


@pytest.mark.parametrize("pre_vote", [True, False])
def test_a_replica_whose_vote_is_unknown_votes_for_nobody_in_that_term_but_in_a_later_one(pre_vote: bool) -> None:
    storage = raft.MemoryStorage.bootstrapped(raft.ConfState.of((1, 2, 3)))
    storage.set_hard_state(raft.HardState(5, raft.UNKNOWN_VOTE, 1))
    node = raft.RawNode(raft.RaftConfig(id=1, pre_vote=pre_vote), storage, random.Random(1))
    kind = raft.MessageType.PRE_VOTE if pre_vote else raft.MessageType.VOTE
    answers = []
    for term in (5, 6):
        node.step(raft.Message(type=kind, to=1, sender=2, term=term, index=1, log_term=1))
        ready = node.ready()
        answers += [m for m in [*ready.messages, *ready.persisted_messages] if m.to == 2]
        node.advance(ready)
    assert [m.reject for m in answers] == [True, False]
