"""A member of a group as its coordinator keeps it (mutable, private to :mod:`.coordinator`)."""

from __future__ import annotations

from dataclasses import dataclass

from ._model import JoinRequest, MemberRecord, Subscription, TopicPartition

__all__ = ["Member"]


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[str, ...]
    subscription: Subscription
    assignment: frozenset[TopicPartition] = frozenset()  # what the current generation gives it
    revoking: frozenset[TopicPartition] = frozenset()
    delivered: frozenset[TopicPartition] = frozenset()  # what it may hold: its last SyncGroup answer
    heartbeat_deadline_ms: int = 0
    awaiting_join: bool = False  # a JoinGroup of this member is parked
    awaiting_sync: bool = False  # a SyncGroup of this member is parked
    synced: bool = False  # sent its SyncGroup for the current generation

    def matches(self, request: JoinRequest) -> bool:
        return self.protocols == request.protocols and self.subscription == request.subscription

    def same_interest(self, request: JoinRequest) -> bool:
        """Same assignors, topics and rack: what a restarted static member must keep to skip a rebalance
        (it owns nothing yet, so its owned partitions differ)."""
        mine, theirs = self.subscription, request.subscription
        return self.protocols == request.protocols and (mine.topics, mine.rack) == (theirs.topics, theirs.rack)

    def update(self, request: JoinRequest) -> None:
        self.session_timeout_ms = request.session_timeout_ms
        self.rebalance_timeout_ms = request.rebalance_timeout_ms
        self.protocols = request.protocols
        self.subscription = request.subscription
        self.client_id, self.client_host = request.client_id, request.client_host
        # A member that says it no longer owns a partition has let it go (an eager member lets all go).
        self.delivered &= request.subscription.owned

    def record(self) -> MemberRecord:
        return MemberRecord(
            self.member_id,
            self.instance_id,
            self.client_id,
            self.client_host,
            self.session_timeout_ms,
            self.rebalance_timeout_ms,
            self.protocols,
            self.subscription,
            self.assignment,
            self.revoking,
            self.delivered,
        )
