"""What a leader knows about each replica (Progress), the in-flight window, and the configuration it tracks.

Flow control (as etcd's tracker): a follower is in one of three states.

* PROBE: the leader does not know where the follower's log matches; it sends one append message at a time
  and waits for the answer (or a heartbeat response) before the next.
* REPLICATE: the match is known; the leader streams appends optimistically (``next`` moves on send), bounded
  by the in-flight window (count and bytes). Successful acks free the window; entries in flight are never
  resent on success. A rejection drops back to PROBE.
* SNAPSHOT: the follower needs entries that were compacted; the leader sent a snapshot and waits.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from enum import IntEnum

from ._quorum import VoteResult, joint_vote, majority_index

__all__ = ["ProgressState", "Inflights", "Progress", "ProgressTracker"]


class ProgressState(IntEnum):
    PROBE = 0
    REPLICATE = 1
    SNAPSHOT = 2


class Inflights:
    """Append messages in flight to one follower (last index, payload bytes), bounded by count and bytes.

    The deque is created on first use: only a leader streaming to a follower needs one, and a node hosts
    thousands of mostly idle groups.
    """

    __slots__ = ("_sent", "bytes", "max_bytes", "max_count")

    def __init__(self, max_count: int, max_bytes: int) -> None:
        self.max_count = max_count
        self.max_bytes = max_bytes
        self._sent: deque[tuple[int, int]] | None = None
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._sent) if self._sent else 0

    def add(self, last_index: int, size: int) -> None:
        if self._sent is None:
            self._sent = deque()
        self._sent.append((last_index, size))
        self.bytes += size

    def free_le(self, index: int) -> None:
        """Forget every message whose last index is <= ``index`` (they were acknowledged)."""
        sent = self._sent
        while sent and sent[0][0] <= index:
            self.bytes -= sent.popleft()[1]

    def free_first_one(self) -> None:
        if self._sent:
            self.bytes -= self._sent.popleft()[1]

    def full(self) -> bool:
        sent = self._sent
        return sent is not None and (len(sent) >= self.max_count or self.bytes >= self.max_bytes)

    def reset(self) -> None:
        if self._sent:
            self._sent.clear()
        self.bytes = 0


class Progress:
    """The leader's view of one replica (voter or learner)."""

    __slots__ = (
        "inflights",
        "is_learner",
        "lost_log",
        "match",
        "next",
        "pending_snapshot",
        "probe_sent",
        "recent_active",
        "sent_commit",
        "state",
    )

    def __init__(self, next_index: int, max_inflight: int, max_inflight_bytes: int, *, is_learner: bool) -> None:
        self.lost_log = False  # it said it is rebuilding a log it lost (it neither votes nor campaigns)
        self.match = 0
        self.next = next_index
        self.state = ProgressState.PROBE
        self.pending_snapshot = 0
        self.recent_active = False
        self.probe_sent = False  # PROBE: an append is out, wait for its answer or a heartbeat response
        self.sent_commit = 0  # highest commit index sent; lets an idle leader skip commit-only appends
        self.is_learner = is_learner
        self.inflights = Inflights(max_inflight, max_inflight_bytes)

    def _reset_state(self, state: ProgressState) -> None:
        self.probe_sent = False
        self.pending_snapshot = 0
        self.state = state
        self.inflights.reset()

    def become_probe(self) -> None:
        if self.state is ProgressState.SNAPSHOT:
            pending = self.pending_snapshot
            self._reset_state(ProgressState.PROBE)
            self.next = max(self.match + 1, pending + 1)
        else:
            self._reset_state(ProgressState.PROBE)
            self.next = self.match + 1
        self.sent_commit = min(self.sent_commit, self.match)

    def become_replicate(self) -> None:
        self._reset_state(ProgressState.REPLICATE)
        self.next = self.match + 1

    def become_snapshot(self, snapshot_index: int) -> None:
        self._reset_state(ProgressState.SNAPSHOT)
        self.pending_snapshot = snapshot_index

    def maybe_update(self, index: int) -> bool:
        """Record an acknowledgement up to ``index``; True if it raised the match index."""
        updated = False
        if self.match < index:
            self.match = index
            updated = True
            self.probe_sent = False
        self.next = max(self.next, index + 1)
        return updated

    def maybe_decrease_to(self, rejected: int, match_hint: int) -> bool:
        """Handle a rejection of the append at ``rejected``; False if it is stale (already handled)."""
        if self.state is ProgressState.REPLICATE:
            if rejected <= self.match:
                return False
            self.next = self.match + 1
            return True
        if self.state is ProgressState.SNAPSHOT or self.next - 1 != rejected:
            return False
        self.next = max(min(rejected, match_hint + 1), self.match + 1)
        self.probe_sent = False
        return True

    def is_paused(self) -> bool:
        state = self.state
        if state is ProgressState.REPLICATE:
            return self.inflights.full()
        if state is ProgressState.PROBE:
            return self.probe_sent
        return True


class ProgressTracker:
    """The configuration (voters, learners, joint state) and one Progress per replica."""

    __slots__ = (
        "auto_leave",
        "learners",
        "learners_next",
        "max_inflight",
        "max_inflight_bytes",
        "progress",
        "voters",
        "voters_outgoing",
        "votes",
    )

    def __init__(self, max_inflight: int, max_inflight_bytes: int) -> None:
        self.max_inflight = max_inflight
        self.max_inflight_bytes = max_inflight_bytes
        self.voters: frozenset[int] = frozenset()
        self.voters_outgoing: frozenset[int] = frozenset()
        self.learners: frozenset[int] = frozenset()
        self.learners_next: frozenset[int] = frozenset()
        self.auto_leave = False
        self.progress: dict[int, Progress] = {}
        self.votes: dict[int, bool] = {}

    @property
    def joint(self) -> bool:
        return bool(self.voters_outgoing)

    def is_voter(self, node_id: int) -> bool:
        return node_id in self.voters or node_id in self.voters_outgoing

    def is_singleton(self) -> bool:
        return len(self.voters) == 1 and not self.voters_outgoing

    def committed_index(self) -> int:
        """The largest index a quorum (both halves of a joint config) has persisted."""
        progress = self.progress
        voters = self.voters
        # Hot path (every acknowledgement): a plain majority, computed inline.
        matches = sorted([progress[v].match if v in progress else 0 for v in voters], reverse=True)
        incoming = matches[len(matches) // 2] if matches else 1 << 63
        if not self.voters_outgoing:
            return incoming
        outgoing = sorted([progress[v].match if v in progress else 0 for v in self.voters_outgoing], reverse=True)
        return min(incoming, outgoing[len(outgoing) // 2])

    def quorum_index(self, value: Callable[[int], int]) -> int:
        """The value a quorum (both halves of a joint config) has reached."""
        incoming = majority_index(self.voters, value)
        if not self.voters_outgoing:
            return incoming
        return min(incoming, majority_index(self.voters_outgoing, value))

    def record_vote(self, node_id: int, granted: bool) -> None:
        self.votes.setdefault(node_id, granted)

    def reset_votes(self) -> None:
        self.votes = {}

    def tally_votes(self) -> VoteResult:
        return joint_vote(self.voters, self.voters_outgoing, self.votes)

    def quorum_active(self, self_id: int) -> bool:
        """True if a quorum of voters was heard from recently (the leader always counts itself)."""
        progress = self.progress
        votes = {node_id: (node_id == self_id or pr.recent_active) for node_id, pr in progress.items()}
        return joint_vote(self.voters, self.voters_outgoing, votes) is VoteResult.WON

    def set_config(
        self,
        voters: frozenset[int],
        voters_outgoing: frozenset[int],
        learners: frozenset[int],
        learners_next: frozenset[int],
        auto_leave: bool,
        next_index: int,
    ) -> None:
        """Switch to a configuration, keeping the progress of replicas that stay and adding new ones."""
        self.voters = voters
        self.voters_outgoing = voters_outgoing
        self.learners = learners
        self.learners_next = learners_next
        self.auto_leave = auto_leave
        members = voters | voters_outgoing | learners | learners_next
        progress = {}
        for node_id in sorted(members):
            pr = self.progress.get(node_id)
            if pr is None:
                # A new replica starts in PROBE from the leader's last index, and counts as active so that a
                # CheckQuorum leader does not step down before it had a chance to answer.
                pr = Progress(next_index, self.max_inflight, self.max_inflight_bytes, is_learner=False)
                pr.recent_active = True
            # A voter being demoted (learners_next) still votes in C_old, so it is not a learner yet.
            pr.is_learner = node_id in learners
            progress[node_id] = pr
        self.progress = progress
