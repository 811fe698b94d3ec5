"""RawNode: one Raft replica driven by the application (the shape of etcd-io/raft's RawNode).

The driving loop, for each group::

    node.tick()                       # every tick, unless node.quiescent
    node.step(message)                # every message received for this group
    node.propose(payload)             # on the leader
    if node.has_ready():
        rd = node.ready()
        ...handle rd in the order of its fields (see Ready)...
        node.advance(rd)

At most one Ready is outstanding: ready() may be called again only after advance(). Between the two, the
application may keep calling step/tick/propose (for example while an fsync is in flight); what they produce goes
into the next Ready. has_ready() can only turn True after one of the inputs above, so a scheduler need only ask
the groups it fed since their last advance().

**Quiescence.** A leader whose group is idle (nothing uncommitted or unapplied, every replica's log matches its
own, no configuration change, transfer or read pending) sends a *quiesce heartbeat* instead of a heartbeat and
stops ticking (``quiescent`` becomes True). A follower that receives it and whose log ends exactly at the
commit index it carries stops ticking too, without answering. From then on the group costs nothing: the
runtime does not tick it (tick() on a quiescent node does nothing anyway). A group wakes up when

* any message is stepped into it (a follower woken by anyone but its leader also sends its leader a heartbeat
  response, so the leader resumes heartbeating);
* a proposal, configuration change, leadership transfer or read is requested;
* the runtime calls :meth:`RawNode.wake`, which it must do when it learns that the leader's node is dead or
  unreachable: a quiescent follower never campaigns on its own.

A quiescent leader does not run CheckQuorum; when woken it gives every follower a fresh election timeout before
judging them, and it cannot commit (or answer reads) without a quorum anyway. Quiescence never decides safety:
if a quiesce heartbeat is lost, that follower stays awake, times out, and its pre-vote wakes the leader, which
re-asserts itself. A leader that removed itself never quiesces (it must hand leadership over).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ._conf_entries import conf_after
from ._raft import Raft, RandomSource, Role
from ._readonly import ReadState
from ._tracker import ProgressState
from .confchange import ConfChange, ConfState
from .config import RaftConfig
from .errors import UsageError
from .messages import Entry, EntryKind, HardState, Message, Snapshot, entries_size
from .storage import Storage

__all__ = ["RawNode", "Ready", "SoftState", "Status", "ProgressStatus", "Role", "ReadState", "RandomSource"]


@dataclass(frozen=True, slots=True)
class SoftState:
    """Volatile state worth reporting: who leads (0 = unknown) and this node's role."""

    leader_id: int
    role: Role


@dataclass(frozen=True, slots=True)
class Ready:
    """Everything the application must do for one group, **in field order**:

    1. ``soft_state``: leader/role changed (None if not); route client requests accordingly.
    2. ``hard_state``: term/vote/commit to persist (None if unchanged).
    3. ``snapshot``: install it before appending ``entries`` (None if none): the storage is replaced by it.
    4. ``entries``: append to the log; the first entry's index may overwrite a stored suffix, so truncate the
       stored log from that index first.
    5. ``must_sync``: if True, the writes of steps 2-4 must be fsynced before step 7 (False means only the
       commit index changed, which may be lost).
    6. ``messages``: may be sent right away, in parallel with the persist (the leader's appends and
       heartbeats, pre-votes, read-index traffic).
    7. ``persisted_messages``: send only after steps 2-4 are durable (vote requests and responses, append
       responses: anything whose meaning depends on this node's durable state).
    8. ``committed_entries``: apply to the state machine after the persist; CONFIG entries are applied to the
       group's configuration by the core itself in :meth:`RawNode.advance`.
    9. ``conf_state``: the configuration once ``committed_entries`` are applied (None if they hold no CONFIG
       entry); persist it with the applied index (see RawNode's ``applied`` argument).
    10. ``read_states``: linearizable reads that may be served once the applied index reaches their index.

    Then call :meth:`RawNode.advance` with this Ready.
    """

    soft_state: SoftState | None
    hard_state: HardState | None
    snapshot: Snapshot | None
    entries: Sequence[Entry]
    must_sync: bool
    messages: Sequence[Message]
    persisted_messages: Sequence[Message]
    committed_entries: Sequence[Entry]
    conf_state: ConfState | None
    read_states: Sequence[ReadState]


@dataclass(frozen=True, slots=True)
class ProgressStatus:
    """The leader's view of one replica."""

    match: int
    next: int
    state: str
    recent_active: bool
    paused: bool
    inflight_messages: int
    inflight_bytes: int
    is_learner: bool
    pending_snapshot: int
    lost_log: bool = False
    """The replica said it is rebuilding a log it lost: it neither votes nor campaigns until it is back."""


@dataclass(frozen=True, slots=True)
class Status:
    """A snapshot of a replica's state for metrics and tests (``progress`` only on the leader)."""

    id: int
    term: int
    vote: int
    commit: int
    applied: int
    last_index: int
    role: Role
    leader_id: int
    quiescent: bool
    lead_transferee: int
    conf_state: ConfState
    progress: dict[int, ProgressStatus] = field(default_factory=dict)


class RawNode:
    """One replica of one group. Not thread-safe: drive each RawNode from one thread at a time.

    ``applied`` is the last index the application's state already contains when restarting (0 means the
    snapshot index). The node starts with the configuration as of ``applied``: storage reports the snapshot's
    (``initial_state()``), and the node applies the CONFIG entries after it up to ``applied`` itself (starting
    from ``storage.conf_checkpoint(applied)`` when the storage recorded a later one).
    """

    __slots__ = ("_committed_size", "_outstanding", "_pending_conf", "_prev_hard", "_prev_soft", "_raft")

    def __init__(
        self,
        config: RaftConfig,
        storage: Storage,
        rng: RandomSource,
        *,
        applied: int = 0,
        recover_until: tuple[int, int] = (0, 0),
    ) -> None:
        """``recover_until``: (index, term) of the last entry of a log that lost entries it may have acknowledged
        (a damaged disk whose suffix was cut off). Until the log is as up to date again, this replica never
        campaigns, grants a vote or pre-vote only to a candidate whose log is as up to date as the lost one (so
        a quorum counting it cannot elect a leader lacking a committed entry it held), and tells the leader of
        its loss so that the leader re-sends the entries. The hard state's commit index and ``applied`` may then
        exceed the last index: both are cut to it. The application must persist the pair durably before cutting
        the log, and pass it on every restart until :attr:`recovering_until` is 0."""
        self._raft = Raft(config, storage, rng, applied, recover_until)
        self._prev_soft = (self._raft.lead, self._raft.role)
        self._prev_hard = (self._raft.term, self._raft.vote, self._raft.log.committed)
        self._outstanding: Ready | None = None
        self._pending_conf: list[Entry] = []
        self._committed_size = 0

    # --- inputs ------------------------------------------------------------------------------------------

    def tick(self) -> None:
        """Advance logical time by one tick (a no-op while quiescent)."""
        self._raft.tick()

    def step(self, message: Message) -> None:
        """Process a message from a peer of this group (wakes a quiescent group)."""
        self._raft.step(message)

    def propose(self, payload: bytes | memoryview, *, kind: EntryKind = EntryKind.DATA, timestamp_ms: int = 0) -> int:
        """Append ``payload`` to the leader's log; returns its index (its term is the current ``term``).

        Raises :class:`NotLeader` on a non-leader and :class:`ProposalDropped` during a leadership transfer,
        after this node's removal, or when ``max_uncommitted_bytes`` is reached. ``kind`` is DATA or CONTROL.
        """
        return self._raft.propose(payload, kind, timestamp_ms)

    def propose_conf_change(self, change: ConfChange, *, timestamp_ms: int = 0) -> int:
        """Propose a configuration change; returns its index. See :mod:`multiraft.raft.confchange`.

        Raises :class:`ConfChangePending` while an earlier change is not applied, and
        :class:`InvalidConfChangeError` if the change does not apply to the current configuration.
        """
        return self._raft.propose_conf_change(change, timestamp_ms)

    @property
    def recovering_until(self) -> int:
        """The index the log must reach before this replica votes or campaigns again (0: not recovering)."""
        return self._raft.recover_until[0] if self._raft._recovering() else 0

    def campaign(self) -> None:
        """Start an election now (pre-vote first if enabled); useful to place leaders deliberately.

        Does nothing on a node that is not a voter of its configuration (see :mod:`multiraft.raft.confchange`).
        Ends a :meth:`delay_election`: a campaign that fails is retried after an election timeout.
        """
        self._raft.wake()
        self._raft.delay_election(0)
        self._raft.hup()

    def delay_election(self, ticks: int) -> None:
        """Campaign no sooner than ``ticks`` ticks beyond the election timeout, unless something changes this
        replica's role or term first (a vote request of a higher term, a leader heard); 0 ends a delay, and so
        does a (pre-)vote request this replica refuses because the candidate's log is behind its own (that
        candidate cannot win). Lets the runtime give one replica of a group the first turn after a restart, so
        that the replicas do not split the vote.

        No effect on a leader or on a follower that knows its leader.
        """
        self._raft.delay_election(ticks)

    def transfer_leader(self, to: int) -> None:
        """Hand leadership to voter ``to`` once it has caught up (aborted after an election timeout).

        On a follower, the request is forwarded to the leader. Proposals raise ProposalDropped meanwhile.
        """
        self._raft.transfer_leader(to)

    def read_index(self, context: bytes) -> None:
        """Request a linearizable read; a ReadState with ``context`` appears in a later Ready.

        On a follower the request goes to the leader. Requests are dropped if leadership changes before they
        are confirmed, so callers need a timeout. Raises :class:`NotLeader` when no leader is known.
        """
        self._raft.read_index(context)

    def wake(self) -> None:
        """Leave quiescence (the runtime calls this when the leader's node is reported dead or unreachable)."""
        self._raft.wake()

    def report_unreachable(self, peer: int) -> None:
        """The transport could not deliver to ``peer``: stop streaming to it and probe instead."""
        self._raft.report_unreachable(peer)

    def report_snapshot(self, peer: int, ok: bool) -> None:
        """The application finished (``ok``) or gave up sending the snapshot the leader asked for."""
        self._raft.report_snapshot(peer, ok)

    # --- outputs -----------------------------------------------------------------------------------------

    def has_ready(self) -> bool:
        """True if ready() would return something to do (always False while a Ready is outstanding)."""
        if self._outstanding is not None:
            return False
        raft = self._raft
        raft.flush()
        if raft.msgs or raft.msgs_after_persist or raft.read_states:
            return True
        log = raft.log
        unstable = log.unstable
        if unstable.entries or unstable.snapshot is not None:
            return True
        if log.committed > log.applying:
            return True
        return (raft.term, raft.vote, log.committed) != self._prev_hard or (raft.lead, raft.role) != self._prev_soft

    def ready(self) -> Ready:
        """Take the work accumulated since the last Ready. Raises UsageError if one is outstanding."""
        if self._outstanding is not None:
            raise UsageError("ready() called again before advance() of the previous Ready")
        raft = self._raft
        raft.flush()
        log = raft.log
        unstable = log.unstable

        soft = (raft.lead, raft.role)
        soft_state = SoftState(soft[0], soft[1]) if soft != self._prev_soft else None
        self._prev_soft = soft
        hard = (raft.term, raft.vote, log.committed)
        hard_state = HardState(*hard) if hard != self._prev_hard else None
        must_sync = hard[0] != self._prev_hard[0] or hard[1] != self._prev_hard[1]
        self._prev_hard = hard

        snapshot = unstable.snapshot
        entries = tuple(unstable.entries) if unstable.entries else ()
        committed: Sequence[Entry] = ()
        conf_state = None
        if snapshot is None and log.committed > log.applying:
            committed = log.next_committed_entries()
            if committed:
                log.applying = committed[-1].index
                config = EntryKind.CONFIG
                conf_entries = [entry for entry in committed if entry.kind == config]  # storage may give ints
                if conf_entries:
                    self._pending_conf = conf_entries
                    conf_state = self._fold_conf_changes(conf_entries)
                if raft.role is Role.LEADER:
                    self._committed_size = entries_size(committed)
        messages = raft.msgs
        raft.msgs = []
        persisted = raft.msgs_after_persist
        raft.msgs_after_persist = []
        read_states = raft.read_states
        raft.read_states = []
        rd = Ready(
            soft_state,
            hard_state,
            snapshot,
            entries,
            must_sync or bool(entries) or snapshot is not None,
            messages,
            persisted,
            committed,
            conf_state,
            read_states,
        )
        self._outstanding = rd
        return rd

    def _fold_conf_changes(self, conf_entries: list[Entry]) -> ConfState:
        conf_state = self._raft.conf_state
        for entry in conf_entries:
            if entry.index > self._raft.conf_index:
                conf_state = conf_after(conf_state, entry) or conf_state  # apply_conf_entry logs a skipped one
        return conf_state

    def advance(self, ready: Ready) -> None:
        """The application persisted, sent and applied ``ready`` as documented on :class:`Ready`."""
        if ready is not self._outstanding:
            raise UsageError("advance() must be given the Ready returned by the last ready()")
        self._outstanding = None
        raft = self._raft
        log = raft.log
        if ready.snapshot is not None:
            index = ready.snapshot.meta.index
            log.unstable.stable_snapshot_to(index)
            log.applied_to(index)
        if ready.entries:
            last = ready.entries[-1]
            if log.unstable.stable_to(last.index, last.term) and raft.role is Role.LEADER:
                raft.on_persisted(last.index, last.term)
        if ready.committed_entries:
            log.applied_to(ready.committed_entries[-1].index)
            if self._pending_conf:
                for entry in self._pending_conf:
                    raft.apply_conf_entry(entry)
                self._pending_conf = []
            if self._committed_size:
                raft.reduce_uncommitted_size(self._committed_size)
                self._committed_size = 0
            if raft.tracker.auto_leave:
                raft.maybe_auto_leave_joint()

    # --- introspection -----------------------------------------------------------------------------------

    @property
    def id(self) -> int:
        return self._raft.id

    @property
    def term(self) -> int:
        return self._raft.term

    @property
    def role(self) -> Role:
        return self._raft.role

    @property
    def leader_id(self) -> int:
        """The leader this node follows (0 if unknown)."""
        return self._raft.lead

    @property
    def applied_index(self) -> int:
        """The last index handed out as applied (advanced)."""
        return self._raft.log.applied

    @property
    def quiescent(self) -> bool:
        """True while the group is asleep: the runtime need not tick it (see the module docstring)."""
        return self._raft.quiescent

    @property
    def conf_state(self) -> ConfState:
        """The configuration as of the applied index."""
        return self._raft.conf_state

    def status(self) -> Status:
        raft = self._raft
        log = raft.log
        progress: dict[int, ProgressStatus] = {}
        if raft.role is Role.LEADER:
            for node_id, pr in raft.tracker.progress.items():
                progress[node_id] = ProgressStatus(
                    match=pr.match,
                    next=pr.next,
                    state=ProgressState(pr.state).name.lower(),
                    recent_active=pr.recent_active,
                    paused=pr.is_paused(),
                    inflight_messages=len(pr.inflights),
                    inflight_bytes=pr.inflights.bytes,
                    is_learner=pr.is_learner,
                    pending_snapshot=pr.pending_snapshot,
                    lost_log=pr.lost_log,
                )
        return Status(
            id=raft.id,
            term=raft.term,
            vote=raft.vote,
            commit=log.committed,
            applied=log.applied,
            last_index=log.last_index(),
            role=raft.role,
            leader_id=raft.lead,
            quiescent=raft.quiescent,
            lead_transferee=raft.lead_transferee,
            conf_state=raft.conf_state,
            progress=progress,
        )
