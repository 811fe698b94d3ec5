"""Writer process for the crash test: appends, overwrites and syncs forever until it is killed.

Before each sync it prints ``pending <state>``, after it ``synced <state>``; the state is what a reader of
the reopened log must find. Payloads are a pure function of (index, term) so the test can check every byte.
"""

from __future__ import annotations

import random
import sys

from multiraft.logging import configure_logging
from storage import Entry, EntryKind, HardState, LogStore, StorageConfig, encode_batch

CONFIG = StorageConfig(segment_bytes=64 * 1024, segment_ms=500)


def payload_for(index: int, term: int, kind: EntryKind) -> bytes:
    if kind == EntryKind.NOOP:
        return b""
    records = 1 + (index * 7 + term) % 9
    value = (b"%d:%d;" % (index, term)) * (1 + (index + term) % 200)
    return encode_batch([value] * records, timestamps_ms=1_000_000 + index)


def kind_for(index: int, term: int) -> EntryKind:
    return EntryKind.NOOP if (index + term) % 11 == 0 else EntryKind.DATA


def state_of(log_last: int, term: int, next_offset: int, first: int) -> str:
    return f"{log_last} {term} {next_offset} {first}"


def main(directory: str, seed: int) -> None:
    configure_logging("warning")  # stdout carries the protocol above; logs go to stderr
    rng = random.Random(seed)
    store = LogStore.open(directory, CONFIG)
    log = store.log("crash", 0)
    term = max(log.hard_state().term, 1)
    payload_for(1, 1, EntryKind.DATA)  # load the encoder's libraries now, so kills land among writes
    print("ready", flush=True)
    while True:
        last = log.last_index()
        start = last + 1
        if rng.random() < 0.15 and last - 4 > log.first_index():
            term += 1
            start = last - rng.randint(0, 4)  # a new leader overwrites a suffix
        entries = [
            Entry(i, term, kind_for(i, term), 1_000 + i, payload_for(i, term, kind_for(i, term)))
            for i in range(start, start + rng.randint(1, 12))
        ]
        log.append(entries)
        log.set_hard_state(HardState(term, 0, 0))
        if rng.random() < 0.05:
            log.roll()
        if rng.random() < 0.05:
            log.drop_before(log.last_index() - 200)
        state = state_of(log.last_index(), log.term(log.last_index()), log.next_offset(), log.first_index())
        print(f"pending {state}", flush=True)
        store.sync()
        print(f"synced {state}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
