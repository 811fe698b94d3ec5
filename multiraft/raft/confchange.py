"""A group's configuration (:class:`ConfState`: voters and learners) and the changes that move it (:class:`ConfChange`).

Configuration changes use **joint consensus** (Raft thesis §4.3, as etcd's ConfChangeV2), with the one-voter case
applied directly:

* A change that adds, removes or demotes **at most one voter** is applied as a *simple* change: any two
  majorities of configurations that differ by one voter overlap, so no joint phase is needed.
* A change that touches **several voters at once** (replacing node A by node D in one step, which replica
  rebalancing does all the time) first enters the **joint configuration** ``C_old,new``: every decision (commit,
  election) needs a majority of the old voters *and* a majority of the new ones. With the default ``AUTO``
  transition the leader leaves the joint configuration by itself (it proposes the empty change) as soon as the
  entry that entered it is applied, which lands in ``C_new``.

Why both: one-at-a-time changes are the common case and need one log entry, but moving a replica across failure
domains one voter at a time passes through an even-sized configuration, and removing a leader or swapping
several replicas can only be done safely in one step with a joint phase. Learners (non-voting replicas) are added
first, catch up, and are then promoted, so a new voter never stalls commits while it copies the log.

A change takes effect on every node when its log entry is **applied** (etcd's rule), never on append; the leader
accepts a new change only once the previous one is applied (:class:`~multiraft.raft.errors.ConfChangePending`),
and a new leader only after its first entry is applied. Removing the leader works: the leader keeps leading
through the joint phase (it still counts in ``C_old``); once it is no longer a voter it refuses proposals, keeps
replicating without counting itself, and sends TimeoutNow to a voter of the new configuration as soon as one has
its whole (committed) log; it steps down when that voter wins. Stepping down at once could strand the remaining
voters in the old configuration, needing the vote of a node whose log is longer than theirs.

**Who campaigns** (etcd's ``promotable()``): only a voter of the node's own configuration, i.e. as of its applied
index (incoming or outgoing voters, so a voter being demoted keeps campaigning until the joint phase ends). A
learner never campaigns, and neither does a replica once it has applied its own removal or demotion, nor one
whose snapshot is not installed yet; a TimeoutNow sent to such a node is ignored. Every replica still answers
vote requests, whatever its own role, since the candidate's configuration may count it. A node learns its status
only by applying CONFIG entries: a promoted learner starts campaigning once it applied its promotion (until then
the other voters, which counted it, elect a leader without it); a replica that never learned of its removal
(cut off before applying it) still believes it is a voter and may campaign, so garbage-collect a removed replica
only once every voter of the new configuration has applied the change (``RawNode.conf_state`` on each of them no
longer lists it); until then it may be needed, as a voter of the configuration they still apply.

:func:`apply_conf_change` is a pure function, so the application (or a storage adapter) can compute the
configuration at any index by folding the CONFIG entries after a snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum

from .errors import InvalidConfChangeError

__all__ = [
    "ConfState",
    "ConfChangeType",
    "ConfChangeTransition",
    "ConfChangeSingle",
    "ConfChange",
    "apply_conf_change",
]


def _ids(values: Iterable[int]) -> tuple[int, ...]:
    return tuple(sorted(set(values)))


@dataclass(frozen=True, slots=True)
class ConfState:
    """The configuration of a group (its voters and learners); every id tuple is sorted and without duplicates.

    ``voters_outgoing`` is non-empty only in a joint configuration; ``learners_next`` holds voters being demoted
    to learners, who become learners when the joint configuration is left; ``auto_leave`` says the leader leaves
    the joint configuration by itself.
    """

    voters: tuple[int, ...] = ()
    learners: tuple[int, ...] = ()
    voters_outgoing: tuple[int, ...] = ()
    learners_next: tuple[int, ...] = ()
    auto_leave: bool = False

    @classmethod
    def of(
        cls,
        voters: Iterable[int],
        learners: Iterable[int] = (),
        voters_outgoing: Iterable[int] = (),
        learners_next: Iterable[int] = (),
        auto_leave: bool = False,
    ) -> ConfState:
        """Build a ConfState from any iterables (sorted and de-duplicated here)."""
        return cls(_ids(voters), _ids(learners), _ids(voters_outgoing), _ids(learners_next), auto_leave)

    @property
    def joint(self) -> bool:
        """True while in a joint configuration (``C_old,new``)."""
        return bool(self.voters_outgoing)

    def members(self) -> frozenset[int]:
        """Every node that holds a replica: voters (incoming and outgoing) and learners."""
        return (
            frozenset(self.voters)
            | frozenset(self.voters_outgoing)
            | frozenset(self.learners)
            | frozenset(self.learners_next)
        )

    def is_voter(self, node_id: int) -> bool:
        """True if ``node_id`` votes in the incoming or the outgoing configuration."""
        return node_id in self.voters or node_id in self.voters_outgoing


class ConfChangeType(IntEnum):
    """What one :class:`ConfChangeSingle` does to one node."""

    ADD_VOTER = 0  # add a voter, or promote a learner
    ADD_LEARNER = 1  # add a learner, or demote a voter
    REMOVE_NODE = 2


class ConfChangeTransition(IntEnum):
    """How a change that needs a joint phase leaves it."""

    AUTO = 0  # simple if at most one voter changes; otherwise joint, left automatically
    JOINT_IMPLICIT = 1  # always joint; the leader leaves it automatically
    JOINT_EXPLICIT = 2  # always joint; the application proposes the empty change to leave


@dataclass(frozen=True, slots=True)
class ConfChangeSingle:
    """One operation of a configuration change, on one node."""

    type: ConfChangeType
    node_id: int


@dataclass(frozen=True, slots=True)
class ConfChange:
    """A configuration change: several operations applied atomically. No operations means "leave joint".

    ``context`` is opaque to the core (the runtime may carry the new node's address in it).
    """

    changes: tuple[ConfChangeSingle, ...] = ()
    transition: ConfChangeTransition = ConfChangeTransition.AUTO
    context: bytes = field(default=b"")

    @classmethod
    def add_voter(cls, node_id: int) -> ConfChange:
        return cls((ConfChangeSingle(ConfChangeType.ADD_VOTER, node_id),))

    @classmethod
    def add_learner(cls, node_id: int) -> ConfChange:
        return cls((ConfChangeSingle(ConfChangeType.ADD_LEARNER, node_id),))

    @classmethod
    def remove_node(cls, node_id: int) -> ConfChange:
        return cls((ConfChangeSingle(ConfChangeType.REMOVE_NODE, node_id),))

    @classmethod
    def leave_joint(cls) -> ConfChange:
        return cls(())

    def is_leave_joint(self) -> bool:
        return not self.changes


def _voter_changes(current: ConfState, change: ConfChange) -> int:
    """How many voters the change adds, removes or demotes (promotions count as one)."""
    voters = set(current.voters)
    after = set(voters)
    for single in change.changes:
        if single.type is ConfChangeType.ADD_VOTER:
            after.add(single.node_id)
        else:
            after.discard(single.node_id)
    return len(voters ^ after)


def apply_conf_change(current: ConfState, change: ConfChange) -> ConfState:
    """Return the configuration that results from applying ``change`` to ``current``.

    Raises :class:`InvalidConfChangeError` when the change does not apply (leaving a joint configuration that is not
    joint, entering a joint configuration twice, removing every voter, a non-positive node id, or a simple change
    that alters more than one voter).
    """
    if change.is_leave_joint():
        if not current.joint:
            raise InvalidConfChangeError("cannot leave a joint configuration: the configuration is not joint")
        learners = set(current.learners) | set(current.learners_next)
        return ConfState.of(current.voters, learners - set(current.voters))
    for single in change.changes:
        if single.node_id <= 0:
            raise InvalidConfChangeError(f"node ids must be > 0, got {single.node_id}")
    enter_joint = change.transition is not ConfChangeTransition.AUTO or _voter_changes(current, change) > 1
    if current.joint:
        raise InvalidConfChangeError("the configuration is joint: leave it (the empty change) before changing it again")
    voters = set(current.voters)
    learners = set(current.learners)
    learners_next: set[int] = set()
    outgoing = set(voters) if enter_joint else set()
    for single in change.changes:
        node = single.node_id
        if single.type is ConfChangeType.ADD_VOTER:
            voters.add(node)
            learners.discard(node)
            learners_next.discard(node)
        elif single.type is ConfChangeType.ADD_LEARNER:
            voters.discard(node)
            if node in outgoing:
                # A demoted voter keeps voting in C_old; it becomes a learner when the joint phase ends.
                learners_next.add(node)
                learners.discard(node)
            else:
                learners.add(node)
        else:
            voters.discard(node)
            learners.discard(node)
            learners_next.discard(node)
    if not voters:
        raise InvalidConfChangeError("the change would remove every voter")
    if not enter_joint and len(set(current.voters) ^ voters) > 1:
        raise InvalidConfChangeError("a simple change may alter at most one voter; use a joint change")
    auto_leave = enter_joint and change.transition is not ConfChangeTransition.JOINT_EXPLICIT
    return ConfState.of(voters, learners, outgoing, learners_next, auto_leave)
