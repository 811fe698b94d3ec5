"""A coordinator driven by simulated consumers that behave as Kafka's consumer client does.

The driver keeps what a real one keeps: the replicated records it "appended", and one waiter per member for
each parked request kind. Consumers react to replies as KIP-429 clients do: a leader computes the assignment
with the chosen assignor; an eager member revokes everything before it rejoins; a cooperative member keeps
what it owns, and rejoins at once when a new assignment revoked something.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from multiraft.consumer_groups import (
    COOPERATIVE_ASSIGNORS,
    NO_GENERATION,
    FencedInstanceIdError,
    GroupCoordinator,
    GroupCoordinatorError,
    GroupDeadError,
    GroupRecord,
    GroupSettings,
    HeartbeatReply,
    HeartbeatRequest,
    IllegalGenerationError,
    JoinReply,
    JoinRequest,
    LeaveReply,
    LeaveRequest,
    MemberIdFactory,
    MemberIdRequiredError,
    Outcome,
    RebalanceInProgressError,
    Reply,
    Subscription,
    SyncReply,
    SyncRequest,
    TopicPartition,
    UnknownMemberIdError,
    assign_for_leader,
    check_offset_commit,
    decode_group_record,
    encode_group_record,
    topics_without_racks,
)

SESSION_MS = 10_000
REBALANCE_MS = 30_000
HEARTBEAT_MS = 3_000


def counter_ids() -> MemberIdFactory:
    """Member ids as a real driver makes them (client id and a unique suffix), deterministic for tests."""
    numbers = itertools.count(1)
    return lambda client_id: f"{client_id or 'member'}-{next(numbers)}"


@dataclass
class Consumer:
    """One simulated consumer process."""

    name: str
    topics: tuple[str, ...]
    protocols: tuple[str, ...]
    instance_id: str | None = None
    rack: str | None = None
    session_ms: int = SESSION_MS
    member_id: str = ""
    generation: int = NO_GENERATION
    owned: frozenset[TopicPartition] = frozenset()
    owned_generation: int = NO_GENERATION
    protocol: str | None = None
    waiting: str | None = None  # "join" or "sync": a request of it is parked at the coordinator
    stable: bool = False
    fenced: bool = False  # stopped for good (FENCED_INSTANCE_ID)
    last_heartbeat_ms: int = 0
    revocations: list[frozenset[TopicPartition]] = field(default_factory=list)

    @property
    def cooperative(self) -> bool:
        return self.protocols[0] in COOPERATIVE_ASSIGNORS


@dataclass
class Group:
    """The driver: a coordinator, its consumers, the clock and the replicated log."""

    partitions: dict[str, int]
    settings: GroupSettings = field(default_factory=lambda: GroupSettings(initial_rebalance_delay_ms=0))
    group_id: str = "g"
    now_ms: int = 0
    coordinator: GroupCoordinator = field(init=False)
    consumers: dict[str, Consumer] = field(default_factory=dict)
    log: list[bytes] = field(default_factory=list)
    # generation -> member id -> assignment, as handed out in SyncGroup replies
    handed_out: dict[int, dict[str, frozenset[TopicPartition]]] = field(default_factory=dict)
    ids: MemberIdFactory = field(default_factory=counter_ids)
    waiters: dict[str, Consumer] = field(default_factory=dict)  # member id -> consumer with a parked request

    def __post_init__(self) -> None:
        self.coordinator = GroupCoordinator(self.group_id, self.ids, self.settings)

    @property
    def records(self) -> list[GroupRecord]:
        return [decode_group_record(b) for b in self.log]

    # ------------------------------------------------------------------------------- consumer actions

    def add(self, name: str, protocol: str = "cooperative-sticky", **kwargs: object) -> Consumer:
        topics = tuple(sorted(self.partitions))
        consumer = Consumer(name, topics, (protocol,), **kwargs)
        self.consumers[name] = consumer
        self.join(consumer)
        return consumer

    def join(self, c: Consumer) -> None:
        claim = c.owned
        if not c.cooperative:
            self._revoke(c, c.owned)  # eager: give up everything before joining
            if c.protocols[0] != "sticky":
                claim = frozenset()  # (eager sticky still tells the leader what it had: Kafka's user data)
        c.stable = False
        subscription = Subscription(c.topics, claim, c.owned_generation, c.rack)
        request = JoinRequest(
            c.member_id, c.session_ms, REBALANCE_MS, c.protocols, subscription, c.instance_id, client_id=c.name
        )
        c.waiting = "join"
        self._deliver(c, self.coordinator.join(request, self.now_ms))

    def heartbeat(self, c: Consumer) -> None:
        c.last_heartbeat_ms = self.now_ms
        request = HeartbeatRequest(c.member_id, c.generation, c.instance_id)
        self._deliver(c, self.coordinator.heartbeat(request, self.now_ms))

    def leave(self, c: Consumer) -> None:
        self._deliver(c, self.coordinator.leave(LeaveRequest(c.member_id, c.instance_id), self.now_ms))
        del self.consumers[c.name]

    def failover(self) -> None:
        """The coordinator's node dies; the new leader of the offsets partition rebuilds the group from the
        replicated records, and every consumer with a request in flight retries it there."""
        reborn = GroupCoordinator.from_records(self.group_id, self.records, self.ids, self.now_ms, self.settings)
        self.coordinator = reborn or GroupCoordinator(self.group_id, self.ids, self.settings)
        self.waiters.clear()
        for c in list(self.consumers.values()):
            if c.waiting and not c.fenced and c.name in self.consumers:
                c.waiting = None
                self.join(c)

    def crash(self, c: Consumer) -> None:
        """kill -9: the process is gone, the coordinator is not told."""
        del self.consumers[c.name]

    def can_commit(
        self, c: Consumer, partitions: frozenset[TopicPartition] | None = None
    ) -> GroupCoordinatorError | None:
        if not c.member_id:
            return UnknownMemberIdError(self.group_id, "")  # a consumer that has no id commits nothing
        try:
            check_offset_commit(self.coordinator, c.member_id, c.generation, partitions or c.owned, c.instance_id)
        except GroupCoordinatorError as exc:
            return exc
        return None

    # ------------------------------------------------------------------------------------- the clock

    def advance(self, ms: int, paused: frozenset[str] = frozenset()) -> None:
        """Let ``ms`` pass in heartbeat-sized steps; consumers not ``paused`` heartbeat on time."""
        end = self.now_ms + ms
        while self.now_ms < end:
            self.now_ms = min(end, self.now_ms + 500)
            self._deliver(None, self.coordinator.tick(self.now_ms))
            self.check()
            for c in list(self.consumers.values()):
                if c.name in paused or c.fenced or c.waiting or not c.member_id:
                    continue
                if self.now_ms - c.last_heartbeat_ms >= HEARTBEAT_MS:
                    self.heartbeat(c)

    def settle(self, limit_ms: int = 120_000) -> None:
        """Run until every consumer is stable and nothing is revoked or left unassigned (bounded)."""
        for _ in range(limit_ms // 1_000):
            if self.settled():
                return
            self.advance(1_000)
        raise AssertionError(f"the group did not settle: {self.describe()}")

    def check(self) -> None:
        """Invariants that hold at every instant; a simulation calls it after every step."""
        coordinator = self.coordinator
        assigned = [tp for m in coordinator.member_ids for tp in coordinator.assignment_of(m)]
        assert len(assigned) == len(set(assigned)), f"a partition assigned twice: {self.describe()}"
        every = [(t, p) for t, n in self.partitions.items() for p in range(n)]
        for tp in every:  # a zombie cannot move offsets: at most one process may commit each partition
            committers = [c.name for c in self.consumers.values() if self.can_commit(c, frozenset({tp})) is None]
            assert len(committers) <= 1, f"{tp} committable by {committers}: {self.describe()}"
        holders: dict[TopicPartition, str] = {}
        for c in self.consumers.values():
            current = c.member_id in coordinator.member_ids
            if not c.cooperative:  # an eager member holding on past a rebalance it missed is fenced instead
                current = current and c.generation == coordinator.generation
            for tp in c.owned if current else ():
                assert tp not in holders, f"{tp} held by {holders[tp]} and {c.name}: {self.describe()}"
                holders[tp] = c.name

    def settled(self) -> bool:
        live = [c for c in self.consumers.values() if not c.fenced]
        if not all(c.stable and c.generation == self.coordinator.generation for c in live):
            return False
        subscribed = {tp for t, n in self.partitions.items() for tp in ((t, p) for p in range(n))}
        return set().union(*(c.owned for c in live)) == subscribed if live else True

    def describe(self) -> str:
        return f"{self.coordinator.state} gen {self.coordinator.generation} " + ", ".join(
            f"{c.name}({c.member_id},g{c.generation},{sorted(c.owned)},stable={c.stable})"
            for c in self.consumers.values()
        )

    # ------------------------------------------------------------------------------------ the driver

    def _deliver(self, caller: Consumer | None, outcome: Outcome) -> None:
        if outcome.reply is None and caller is not None:
            assert outcome.parked_as, outcome
            self.waiters[outcome.parked_as] = caller
        for record in outcome.records:
            self.log.append(encode_group_record(record))
        replies: list[tuple[Consumer | None, Reply]] = []
        if outcome.reply is not None:
            replies.append((caller, outcome.reply))
        for reply in outcome.deferred:
            replies.append((self._by_member(reply.member_id), reply))
        for consumer, reply in replies:
            if consumer is not None and consumer.name in self.consumers:
                self._react(consumer, reply)

    def _by_member(self, member_id: str) -> Consumer | None:
        if member_id in self.waiters:
            return self.waiters.pop(member_id)
        return next((c for c in self.consumers.values() if c.member_id == member_id), None)

    def _react(self, c: Consumer, reply: Reply) -> None:
        if isinstance(reply, LeaveReply):
            return
        error = reply.error
        if isinstance(reply, JoinReply):
            c.waiting = None
            if isinstance(error, MemberIdRequiredError):
                c.member_id = error.member_id
                self.join(c)
            elif error is not None:
                self._on_error(c, error)
            else:
                c.member_id, c.generation, c.protocol = reply.member_id, reply.generation, reply.protocol_name
                assignments = assign_for_leader(reply, topics_without_racks(self.partitions))
                c.waiting = "sync"
                request = SyncRequest(c.member_id, c.generation, assignments, c.instance_id)
                self._deliver(c, self.coordinator.sync(request, self.now_ms))
        elif isinstance(reply, SyncReply):
            c.waiting = None
            if error is not None:
                self._on_error(c, error)
                return
            # A restarted static member is the same member under a new id: key it by its instance.
            self.handed_out.setdefault(reply.generation, {})[c.instance_id or c.member_id] = reply.assignment
            revoked = c.owned - reply.assignment
            self._revoke(c, revoked)
            c.owned, c.owned_generation, c.generation = reply.assignment, reply.generation, reply.generation
            c.stable = True
            c.last_heartbeat_ms = self.now_ms
            if revoked and c.cooperative:
                self.join(c)  # KIP-429: rejoin so that the revoked partitions reach their new owners
        elif isinstance(reply, HeartbeatReply) and error is not None:
            self._on_error(c, error)

    def _on_error(self, c: Consumer, error: GroupCoordinatorError) -> None:
        c.stable = False
        if isinstance(error, GroupDeadError):
            return  # its coordinator moved: failover() makes it retry on the new one
        if isinstance(error, FencedInstanceIdError):
            c.fenced = True
            c.owned = frozenset()
            return
        if isinstance(error, (UnknownMemberIdError, IllegalGenerationError)):
            c.owned, c.owned_generation = frozenset(), NO_GENERATION  # partitions lost, not revoked
            c.generation = NO_GENERATION
            if isinstance(error, UnknownMemberIdError):
                c.member_id = ""
        elif not isinstance(error, RebalanceInProgressError):
            raise AssertionError(f"{c.name}: unexpected {error!r}")
        self.join(c)

    def _revoke(self, c: Consumer, partitions: frozenset[TopicPartition]) -> None:
        if partitions:
            # on_revoke commits: it must be allowed for every partition the member gives up.
            assert self.can_commit(c, partitions) is None, (c.name, self.can_commit(c, partitions))
            c.revocations.append(partitions)
        c.owned = c.owned - partitions
