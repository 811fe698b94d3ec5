"""The final read's high watermarks: one partition without a leader does not hide the others (no cluster)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from multiraft import Admin, RequestTimeoutError
from multiraft.tools.nemesis.runner import _high_watermarks


class _OneLeaderless:
    """list_offsets as a cluster answers it when ``partition`` has no leader: any request naming it fails."""

    def __init__(self, ends: dict[int, int], leaderless: int) -> None:
        self.ends, self.leaderless = ends, leaderless

    def list_offsets(self, topic: str, spec: str, partitions: Iterable[int] | None = None) -> dict[int, int]:
        wanted = list(self.ends) if partitions is None else list(partitions)
        if self.leaderless in wanted:
            raise RequestTimeoutError(f"{topic}/{self.leaderless}: no answer before the deadline")
        return {p: self.ends[p] for p in wanted}


def test_a_partition_without_a_leader_leaves_the_other_partitions_high_watermarks_known() -> None:
    admin = cast(Admin, _OneLeaderless({0: 10, 1: 20, 2: 30, 3: 40}, leaderless=2))
    ends, unknown = _high_watermarks(admin, 4)
    assert ends == {0: 10, 1: 20, 3: 40}
    assert list(unknown) == [2] and "no answer before the deadline" in unknown[2]


def test_every_partition_with_a_leader_is_asked_for_in_one_request() -> None:
    admin = cast(Admin, _OneLeaderless({0: 10, 1: 20}, leaderless=-1))
    assert _high_watermarks(admin, 2) == ({0: 10, 1: 20}, {})
