"""The gossip queue: limited retransmissions, newest news about a member wins, least-sent first."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from membership._queue import BroadcastQueue


def _payload(key: int, version: int, size: int = 30) -> bytes:
    return f"{key}:{version}:".encode().ljust(size, b".")


def test_a_message_is_sent_exactly_limit_times() -> None:
    queue = BroadcastQueue()
    queue.put(1, _payload(1, 0))
    sent = [queue.take(1000, limit=3) for _ in range(5)]
    assert sent == [[_payload(1, 0)]] * 3 + [[], []]
    assert len(queue) == 0


def test_newer_news_about_a_member_replaces_older_news() -> None:
    queue = BroadcastQueue()
    queue.put(1, _payload(1, 0))
    queue.take(1000, limit=5)
    queue.put(1, _payload(1, 1))
    assert queue.take(1000, limit=5) == [_payload(1, 1)]
    assert queue.transmits(1) == 1


def test_least_sent_messages_go_first_when_space_is_short() -> None:
    queue = BroadcastQueue()
    queue.put(1, _payload(1, 0))
    queue.take(1000, limit=5)
    queue.put(2, _payload(2, 0))
    # Room for one message: the fresh one wins over the one already sent once.
    assert queue.take(40, limit=5) == [_payload(2, 0)]
    # Now both were sent once; the newer goes first.
    assert queue.take(40, limit=5) == [_payload(2, 0)]
    assert queue.take(40, limit=5) == [_payload(1, 0)]


def test_a_shrunken_limit_retires_messages_already_sent_enough() -> None:
    queue = BroadcastQueue()
    queue.put(1, _payload(1, 0))
    queue.take(1000, limit=4)
    queue.take(1000, limit=4)
    assert queue.take(1000, limit=2) == []
    assert len(queue) == 0


def test_nothing_is_taken_when_no_message_fits() -> None:
    queue = BroadcastQueue()
    queue.put(1, _payload(1, 0, size=100))
    assert queue.take(99, limit=5) == []
    assert queue.transmits(1) == 0


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(1, 6), st.integers(23, 120)),
        st.tuples(st.just("take"), st.integers(0, 600), st.integers(1, 6)),
    ),
    max_size=80,
)


@given(ops=_ops)
def test_no_message_is_sent_more_than_its_limit_or_after_being_replaced(ops: list[tuple[str, int, int]]) -> None:
    queue = BroadcastQueue()
    version: dict[int, int] = {}
    sends: Counter[bytes] = Counter()
    for op, a, b in ops:
        if op == "put":
            version[a] = version.get(a, 0) + 1
            queue.put(a, _payload(a, version[a], b))
            continue
        budget, limit = a, b
        taken = queue.take(budget, limit)
        assert sum(len(p) for p in taken) <= budget
        assert len({p.split(b":")[0] for p in taken}) == len(taken)  # at most one message per member
        for payload in taken:
            key, ver = (int(x) for x in payload.split(b":")[:2])
            assert ver == version[key]  # replaced news never goes out again
            assert sends[payload] < limit  # never beyond the limit in force, even if it shrank
            sends[payload] += 1
        assert len(queue) <= len(version)


@given(sizes=st.lists(st.integers(23, 200), min_size=1, max_size=30), budget=st.integers(23, 1400))
def test_a_take_fills_the_budget_with_the_least_sent_messages_that_fit(sizes: list[int], budget: int) -> None:
    queue = BroadcastQueue()
    for key, size in enumerate(sizes, start=1):
        queue.put(key, _payload(key, 0, size))
    taken = queue.take(budget, limit=10)
    left = budget - sum(len(p) for p in taken)
    # Whatever was not taken did not fit in what was left.
    untaken = [size for key, size in enumerate(sizes, start=1) if queue.transmits(key) == 0]
    assert all(size > left for size in untaken)
