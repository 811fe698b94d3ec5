"""What ties a Consumer to its group membership: the rebalance callbacks, the topics the leader assigns
from, and the subscription argument.

The callbacks run on the consumer's thread inside ``poll()`` or ``close()``: ``on_revoke`` before a partition
is given up (its position is still there: commit it), ``on_lost`` (default ``on_revoke``) after the
membership was lost (the partitions belong to someone else already: commits are refused), ``on_assign``
after the partitions are in place (seek there if you like). With auto-commit, the positions of revoked
partitions are committed before ``on_revoke`` runs, as Kafka's consumer does before it rejoins.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeAlias

from multiraft.consumer_groups import TopicRacks
from multiraft.errors import MultiraftError
from multiraft.logging import get_logger
from rpc.client._cluster import ClusterClient
from rpc.client._consumer_group_heartbeat import HeartbeatThread
from rpc.client._consumer_group_link import GrpcGroupLink
from rpc.client._consumer_group_member import GroupMembership, topic_racks
from rpc.client._consumer_group_settings import MemberSettings
from rpc.client._records import TopicPartition

if TYPE_CHECKING:
    from rpc.client._consumer import Consumer

__all__ = [
    "RebalanceCallback",
    "Rebalancer",
    "cluster_topics",
    "log_commit_failure",
    "matching_topics",
    "start_membership",
    "subscription_of",
]

log = get_logger(__name__)

RebalanceCallback: TypeAlias = Callable[["Consumer", list[TopicPartition]], Any]


def subscription_of(topics: str | Iterable[str] | re.Pattern[str]) -> tuple[str, ...] | re.Pattern[str]:
    """The ``subscribe`` argument as a tuple of names or a pattern (matched against whole topic names)."""
    if isinstance(topics, re.Pattern):
        return topics
    names = (topics,) if isinstance(topics, str) else tuple(topics)
    if not names or not all(isinstance(t, str) and t for t in names):
        raise TypeError("subscribe() takes a topic name, an iterable of topic names or a compiled re.Pattern")
    return names


def matching_topics(subscription: tuple[str, ...] | re.Pattern[str], known: Iterable[str]) -> tuple[str, ...]:
    """The topics a subscription names: its names, or the known topics a pattern matches whole (internal
    ``__`` topics excepted)."""
    if isinstance(subscription, tuple):
        return subscription
    return tuple(sorted(t for t in known if not t.startswith("__") and subscription.fullmatch(t)))


def cluster_topics(client: ClusterClient) -> Callable[[], TopicRacks]:
    """Every topic with its partitions' replica racks, from fresh metadata (the leader assigns from it)."""

    def read() -> TopicRacks:
        metadata = client.metadata(refresh=True)
        replicas = {name: [p.replicas for p in topic.partitions] for name, topic in metadata.topics.items()}
        return topic_racks(replicas, metadata.racks)

    return read


class Rebalancer:
    """The consumer's :class:`~rpc.client._consumer_group_member.PartitionListener`: runs the user's callbacks and
    adds or drops the partitions' buffers (through the consumer's private hooks). Holds the consumer weakly:
    the heartbeat thread must not keep a dropped consumer alive."""

    def __init__(self, consumer: Consumer, *, auto_commit: bool) -> None:
        self._consumer = weakref.ref(consumer)
        self.on_assign: RebalanceCallback | None = None
        self.on_revoke: RebalanceCallback | None = None
        self.on_lost: RebalanceCallback | None = None
        self._auto_commit = auto_commit

    def _get(self) -> Consumer | None:
        return self._consumer()

    def revoking(self, partitions: list[TopicPartition]) -> None:
        consumer = self._get()
        if consumer is None:
            return
        try:
            if self._auto_commit:
                consumer._commit_positions_quietly(partitions)
            if self.on_revoke is not None:
                self.on_revoke(consumer, partitions)
        finally:
            consumer._drop_partitions(partitions)

    def lost(self, partitions: list[TopicPartition]) -> None:
        consumer = self._get()
        if consumer is None:
            return
        callback = self.on_lost if self.on_lost is not None else self.on_revoke
        try:
            if callback is not None:
                callback(consumer, partitions)
        finally:
            consumer._drop_partitions(partitions)

    def assigned(self, partitions: list[TopicPartition]) -> None:
        consumer = self._get()
        if consumer is None:
            return
        consumer._add_partitions(partitions)
        if self.on_assign is not None:
            self.on_assign(consumer, partitions)


def start_membership(
    client: ClusterClient,
    settings: MemberSettings,
    listener: Rebalancer,
    wake: Callable[[], None],
    metadata_max_age_s: float,
) -> tuple[GroupMembership, HeartbeatThread]:
    """A consumer's membership over gRPC, with its heartbeat thread running."""
    link = GrpcGroupLink(
        client,
        settings.group_id,
        request_timeout_s=min(client.request_timeout_s, settings.session_timeout_s),
        rebalance_timeout_ms=settings.rebalance_timeout_ms,
    )
    membership = GroupMembership(
        settings, link, listener, cluster_topics(client), wake=wake, metadata_max_age_s=metadata_max_age_s
    )
    heartbeat = HeartbeatThread(membership.beat, name=f"multiraft-heartbeat-{settings.group_id}")
    heartbeat.start()
    return membership, heartbeat


def log_commit_failure(group: str | None, error: MultiraftError, *, when: str) -> None:
    log.warning("auto-commit failed", group=group, when=when, error=str(error), reason=error.reason)
