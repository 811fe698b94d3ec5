"""What the services answer: plain values, independent of any wire format (gRPC today, Kafka later).

These are the server's face of the wire; the client library has its own public values on the other face
(``rpc.client._admin``: ``TopicInfo``, ``ClusterInfo``, ``DrainStatus``...), built from the wire messages. The
two may not share a module (the client does not import the node runtime) and need not share fields: a
server value carries what the node knows (peer addresses, capacity, move group ids), a client value what the
wire tells a user. The names differ (``*Description`` here, ``*Info`` there) so that a reader never mistakes one
for the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from multiraft import controller as ctl
from multiraft.errors import MultiraftError
from multiraft.node.vocabulary.consumer_groups import GroupListingRow
from multiraft.node.vocabulary.status import MoveReport

__all__ = [
    "ProduceAck",
    "FetchResult",
    "PartitionDescription",
    "TopicDescription",
    "NodeDescription",
    "ClusterDescription",
    "DrainProgress",
    "UnansweredPartition",
    "ConsumerGroupListings",
]


@dataclass(frozen=True, slots=True)
class ProduceAck:
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class FetchResult:
    batches: bytes
    high_watermark: int
    log_start_offset: int
    next_offset: int


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    in_sync_replicas: tuple[int, ...]
    preferred_leader: int
    high_watermark: int
    log_start_offset: int
    leader_epoch: int
    learners: tuple[int, ...] = ()
    replica_lag: dict[int, int] = field(default_factory=dict)  # entries behind the leader, per replica


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    partitions: tuple[PartitionDescription, ...]
    configs: dict[str, str]
    replication_factor: int
    internal: bool = False  # issue 25: __consumer_offsets and other system topics
    config_entries: tuple[ctl.ConfigEntry, ...] = ()  # issue 25: every config with its source (describe only)


@dataclass(frozen=True, slots=True)
class NodeDescription:
    node_id: int
    client_address: str
    peer_address: str
    rack: str
    state: str
    capacity: float


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str
    controller_id: int
    nodes: tuple[NodeDescription, ...]
    loads: tuple[tuple[int, int, int], ...]  # (node id, replicas, leaders)
    under_replicated: tuple[tuple[str, int], ...]
    partitions: int
    moves: tuple[MoveReport, ...] = ()  # replica moves in flight (known to the controller leader)
    moves_error: str | None = None  # why ``moves`` could not be read (then empty), None when they were


@dataclass(frozen=True, slots=True)
class DrainProgress:
    """What is still on a draining node. The node decides ``safe_to_stop`` from it; the client's
    ``DrainStatus`` carries that verdict as the wire delivers it."""

    replicas_left: int
    leaders_left: int

    @property
    def safe_to_stop(self) -> bool:
        return self.replicas_left == 0 and self.leaders_left == 0


@dataclass(frozen=True, slots=True)
class UnansweredPartition:
    """A ``__consumer_offsets`` partition that did not answer a listing in time, and why."""

    partition: int
    error: MultiraftError


@dataclass(frozen=True, slots=True)
class ConsumerGroupListings:
    """The groups of the partitions that answered (by name) and the partitions that did not: a listing is
    partial, not failed, when some partition has no leader (as ``rpk group list`` shows it)."""

    rows: list[GroupListingRow]
    unanswered: list[UnansweredPartition] = field(default_factory=list)
