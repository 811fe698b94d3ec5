"""Fencing: whether an offset commit may move a group's offsets. Pure checks over a coordinator's state.

A commit names the member, its static instance id (if any) and the generation it believes current. The
checks, in Kafka's order, refuse a zombie with the most precise reason:

1. the group is Dead (deleted, or the coordinator moved): ``GroupDeadError``;
2. a commit outside any generation (``generation == -1``, no member id: an admin tool or a consumer that
   assigns itself partitions) is accepted only while the group has no members;
3. another process now holds the member's static ``group_instance_id``: ``FencedInstanceIdError``;
4. the member is not in the group (expired after its session timeout, left, never joined):
   ``UnknownMemberIdError``;
5. the generation is not the group's: ``IllegalGenerationError`` (it missed a rebalance);
6. the group is waiting for the leader's assignment of a new generation: ``RebalanceInProgressError``;
7. a partition the member neither owns nor is revoking in this generation: ``PartitionNotOwnedError``.

During PreparingRebalance members of the current generation may still commit (Kafka allows it too): that is
when a member commits in ``on_revoke`` before it rejoins.
"""

from __future__ import annotations

from collections.abc import Iterable

from ._model import NO_GENERATION, GroupState, TopicPartition
from .coordinator import GroupCoordinator
from .errors import (
    FencedInstanceIdError,
    GroupDeadError,
    IllegalGenerationError,
    PartitionNotOwnedError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

__all__ = ["check_offset_commit"]


def check_offset_commit(
    group: GroupCoordinator,
    member_id: str,
    generation: int,
    partitions: Iterable[TopicPartition],
    group_instance_id: str | None = None,
) -> None:
    """Raise the reason ``member_id`` may not commit offsets of ``partitions`` now; return if it may."""
    if group.state is GroupState.DEAD:
        raise GroupDeadError(f"group {group.group_id!r} is dead")
    if generation == NO_GENERATION and not member_id and group_instance_id is None:
        if group.member_ids:
            raise UnknownMemberIdError(group.group_id, member_id)  # an active group takes only its members'
        return
    if group_instance_id is not None:
        holder = group.member_of_instance(group_instance_id)
        if holder is not None and holder != member_id:
            raise FencedInstanceIdError(group.group_id, group_instance_id, member_id)
    if member_id not in group.member_ids:
        raise UnknownMemberIdError(group.group_id, member_id)
    if generation != group.generation:
        raise IllegalGenerationError(group.group_id, generation, group.generation)
    if group.state is GroupState.COMPLETING_REBALANCE:
        raise RebalanceInProgressError(f"group {group.group_id!r} is completing a rebalance: commit after it")
    allowed = group.committable_by(member_id)
    foreign = sorted(set(partitions) - allowed)
    if foreign:
        raise PartitionNotOwnedError(group.group_id, member_id, foreign)
