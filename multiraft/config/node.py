"""A node's configuration: one frozen dataclass, read from TOML, then ``MULTIRAFT_*`` variables, then flags.

Every field documents its unit and default (``docs/configuration.md`` is generated from them by
``multiraft node config-reference``). A wrong key or value stops start-up with a message that names it.

    node_id = 1
    data_dir = "/var/lib/multiraft"
    client_address = "127.0.0.1:7000"
    peer_address = "127.0.0.1:7100"
    initial_cluster = ["1=127.0.0.1:7100", "2=127.0.0.1:7101", "3=127.0.0.1:7102"]

A key ``some_key`` is overridden by the variable ``MULTIRAFT_SOME_KEY`` and by the flag ``--some-key``.
Lists in variables and flags are comma-separated.
"""

from __future__ import annotations

import os
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Self

from multiraft.config.consumer_groups import ConsumerGroupConfig
from multiraft.config.env import DEBUG_PREFIX, ENV_PREFIX, IGNORED_VARIABLES
from multiraft.config.placement import PlacementConfig
from multiraft.config.security import SecuritySettings
from multiraft.errors import ConfigError
from storage import ENTRY_OVERHEAD_BYTES, StorageConfig
from storage.config_fields import setting

__all__ = ["NodeConfig", "load_config", "parse_address", "config_reference", "MAX_STORABLE_BATCH_BYTES"]

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

MAX_STORABLE_BATCH_BYTES = StorageConfig().max_payload_bytes
"""The largest record batch one log entry holds: the store's max_entry_bytes less the entry header."""

# Headers of one append message on the peer transport: 68 bytes, 29 per entry (at most 1024), 8 for the group.
_APPEND_OVERHEAD_BYTES = 64 * KiB
# A produce request's fields besides its batch (topic name, numbers) and the protobuf framing around them.
_REQUEST_OVERHEAD_BYTES = 64 * KiB
# A coalesced heartbeat waits up to one heartbeat interval in the transport: a leader's CheckQuorum must still
# hear a round trip within an election timeout, and a follower a heartbeat, with an interval to spare.
_MIN_ELECTION_HEARTBEATS = 3


_setting = setting


def parse_address(value: str, key: str) -> tuple[str, int]:
    """``host:port`` -> (host, port); raises ConfigError naming ``key``."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(key, f"expected host:port, got {value!r}")
    return host.strip("[]"), int(port)


@dataclass(frozen=True)
class _NodeSettings:
    """The keys of a node but its security keys (:class:`multiraft.config.security.SecuritySettings`)."""

    node_id: int = _setting(0, "id", "This node's id, an integer >= 1, unique and permanent in the cluster. Required.")
    data_dir: str = _setting("", "path", "Directory of the node's log store and metadata. Required.")
    cluster_id: str = _setting(
        "multiraft", "name", "Name of the cluster; nodes refuse peers and gossip from another cluster."
    )
    client_address: str = _setting("127.0.0.1:7000", "host:port", "gRPC listen address for clients.")
    peer_address: str = _setting(
        "127.0.0.1:7100",
        "host:port",
        "Listen address of the Raft transport between nodes (length-prefixed binary frames over TCP). Clients "
        "and peers use separate ports so that client load cannot delay Raft heartbeats.",
    )
    gossip_address: str = _setting(
        "127.0.0.1:7200", "host:port", "SWIM member-list address (UDP for probes and gossip, TCP for state sync)."
    )
    advertise_client_address: str = _setting(
        "", "host:port", "Client address other nodes and clients should use; defaults to client_address."
    )
    advertise_peer_address: str = _setting(
        "", "host:port", "Peer address other nodes should use; defaults to peer_address."
    )
    initial_cluster: tuple[str, ...] = _setting(
        (),
        "list of ID=host:port",
        "The nodes that form a new cluster and their peer addresses, identical on each of them. The first "
        "controller_replicas ids (in order) replicate the cluster metadata. Empty on a node that joins a "
        "running cluster through seeds.",
    )
    seeds: tuple[str, ...] = _setting(
        (),
        "list of host:port",
        "Gossip addresses of running nodes to join through (member-list seeds). A node of initial_cluster "
        "retries its seeds until one answers; a node that joins a running cluster needs at least one.",
    )
    membership_profile: str = _setting(
        "lan",
        "profile",
        "Member-list timings: lan (probe every 1 s, a crash is declared within about 10 s) or local (one "
        "host: probe every 200 ms, declared within about 2 s). See membership.MembershipConfig.",
    )
    controller_replicas: int = _setting(
        3, "nodes", "Voters of the cluster metadata group (odd, 1..7); other nodes follow it as learners."
    )

    tick_ms: int = _setting(50, "ms", "Length of one Raft tick.")
    election_ticks: int = _setting(
        10,
        "ticks",
        "Election timeout base; each election waits a random time in [1x, 2x) of this. At least 3x "
        "heartbeat_ticks: a coalesced heartbeat may wait one heartbeat interval before it leaves.",
    )
    heartbeat_ticks: int = _setting(
        2,
        "ticks",
        "Leader heartbeat interval. Heartbeats are coalesced: each node sends each peer one frame per interval "
        "with the heartbeats of all groups, and the peer answers them in one frame.",
    )
    max_inflight_bytes: int = _setting(
        32 * MiB, "bytes", "Most unacknowledged append bytes a leader sends one follower of one group."
    )
    max_append_bytes: int = _setting(4 * MiB, "bytes", "Largest append message a leader sends.")
    max_frame_bytes: int = _setting(
        64 * MiB,
        "bytes",
        "Largest frame on the peer transport, the same on every node: a round's messages to a peer are cut into "
        "frames of at most this size, and a larger frame received closes the connection. At least "
        "max_append_bytes + max_batch_bytes + 64 KiB, so that any one append message fits.",
    )

    max_batch_bytes: int = _setting(
        MAX_STORABLE_BATCH_BYTES,
        "bytes",
        "Ceiling on a record batch for any topic (a topic's max.message.bytes may only be lower); also the gRPC "
        "message limit. At most 16 MiB - 37 bytes (the default): a batch is one log entry, and the log store "
        "holds entries of at most 16 MiB including a 37-byte header.",
    )
    produce_timeout_ms: int = _setting(
        30_000, "ms", "How long Produce waits for a commit when the request sets no timeout."
    )
    fetch_max_bytes: int = _setting(1 * MiB, "bytes", "Fetch size when the request sets none.")
    fetch_max_wait_ms: int = _setting(30_000, "ms", "Ceiling on a Fetch long-poll.")
    default_replication_factor: int = _setting(3, "replicas", "Replication factor of topics created without one.")
    default_partitions: int = _setting(1, "partitions", "Partition count of topics created without one.")
    max_topic_partitions: int = _setting(
        4_096, "partitions", "Most partitions one topic may have (each is a Raft group on every replica)."
    )
    offsets_partitions: int = _setting(
        8, "partitions", "Partitions of the internal __consumer_offsets topic (fixed once it is created)."
    )
    max_offsets_per_commit: int = _setting(
        10_000, "rows", "Most partitions one CommitOffsets request may carry; more are refused before any work."
    )
    max_offsets_commit_bytes: int = _setting(
        4 * MiB,
        "bytes",
        "Largest offsets commit as it is written to the log (its JSON encoding, where a control character of "
        "metadata takes 6 bytes); a larger CommitOffsets is refused before it is proposed. At most 16 MiB - 37 "
        "bytes, what one log entry holds.",
    )
    max_request_bytes: int = _setting(
        17 * MiB,
        "bytes",
        "Largest client request the gRPC listener accepts (grpc.max_receive_message_length); a larger one is "
        "refused with RESOURCE_EXHAUSTED before it is parsed. At least max_batch_bytes + 64 KiB, so that the "
        "largest allowed batch fits with its request fields.",
    )
    max_request_items: int = _setting(
        10_000,
        "items",
        "Most items of any one repeated or map field of a client request (ListOffsets partitions, Metadata "
        "topics, CommitOffsets and FetchOffsets rows, topic configs); more are refused with INVALID_ARGUMENT "
        "naming the field, before any work. At least max_topic_partitions and max_offsets_per_commit.",
    )
    max_request_string_chars: int = _setting(
        4_096,
        "characters",
        "Longest string field of a client request (topic names, group ids, config keys and values, offset "
        "metadata); a longer one is refused with INVALID_ARGUMENT naming the field, before any work. Topic "
        "names (249) and group ids (255) have their own, lower limits.",
    )
    fetch_max_bytes_limit: int = _setting(
        16 * MiB,
        "bytes",
        "Ceiling on a Fetch's or Subscribe's max_bytes: a larger request is clamped to it, as Kafka clamps to "
        "the broker's fetch.max.bytes. An answer still holds at least one whole batch, so it may exceed this by "
        "up to one batch. At least fetch_max_bytes.",
    )
    max_inflight_produce_bytes: int = _setting(
        256 * MiB,
        "bytes",
        "Most bytes of produced batches this node holds uncommitted at once, over all clients; a batch above "
        "the budget is refused with RESOURCE_EXHAUSTED (retriable) before it is proposed. At least "
        "max_batch_bytes.",
    )
    max_stream_inflight_bytes: int = _setting(
        64 * MiB,
        "bytes",
        "Most bytes of batches one ProduceStream has uncommitted at once: the stream stops reading until "
        "answers free room (back-pressure). Per connection, at most max_concurrent_streams times this.",
    )
    max_concurrent_streams: int = _setting(
        10_000,
        "streams",
        "Most concurrent calls (HTTP/2 streams) on one client connection (grpc.max_concurrent_streams); the "
        "client waits for a free one. A consumer holds one Subscribe stream per partition it reads from the "
        "node, so this is at least max_topic_partitions.",
    )
    max_concurrent_rpcs: int = _setting(
        50_000,
        "calls",
        "Most calls the gRPC listener runs at once, streams included (grpc maximum_concurrent_rpcs); more are "
        "answered RESOURCE_EXHAUSTED, which clients retry.",
    )
    max_client_connections: int = _setting(
        1_024,
        "connections",
        "Most client connections the gRPC listener holds (grpc.max_allowed_incoming_connections); more are "
        "closed as they arrive.",
    )
    max_peer_connections: int = _setting(
        256,
        "connections",
        "Most connections the peer listener holds at once (a cluster needs one per other node); more are "
        "closed as they arrive.",
    )
    max_peer_requests_per_connection: int = _setting(
        256,
        "requests",
        "Most node-to-node requests one peer connection may have in service at once (offsets commits forwarded "
        "to their leader, controller changes, status queries), holding at most max_frame_bytes of request "
        "bodies; more are answered at once with an error (the caller retries), never queued.",
    )
    peer_direct_writes: bool = _setting(
        True,
        "bool",
        "Write a round's Raft messages to a peer from the scheduler thread itself while that connection has "
        "nothing waiting to be written (plain TCP; TLS connections always write from the event loop), instead of "
        "handing them to the event loop: one thread hand-off less on each side of an acknowledgement. false: "
        "every write goes through the event loop.",
    )
    producer_id_block: int = _setting(
        1_000, "ids", "Producer ids a node reserves from the controller at a time for InitProducer."
    )
    retention_check_ms: int = _setting(
        1_000,
        "ms",
        "How often each partition leader checks retention and segment age (then proposes drops and rolls).",
    )
    leader_balance_ms: int = _setting(
        5_000,
        "ms",
        "How often each partition leader hands leadership back to the partition's preferred leader (as the "
        "controller assigned it) when that node is live, ACTIVE and caught up.",
    )

    scrub_bytes_per_s: int = _setting(
        4 * MiB,
        "bytes/s",
        "Rate at which a background scrubber re-reads every replica's stored entries to check their CRCs (0 = "
        "off); a damaged entry is cut off with the log after it and fetched again from the leader.",
    )

    map_size_bytes: int = _setting(1024 * GiB, "bytes", "LMDB map size: the most the log store may grow to.")
    max_segments: int = _setting(65536, "segments", "Most segments in the node's log store at once.")
    min_free_disk_bytes: int = _setting(
        256 * MiB,
        "bytes",
        "Low-water mark of free space on data_dir's file system: below it the node refuses Produce to the "
        "partitions it leads (STORAGE_FULL) while reads go on, and the controller places no new replica on it.",
    )
    min_free_map_bytes: int = _setting(
        64 * MiB,
        "bytes",
        "Low-water mark of the LMDB map's headroom (map_size_bytes less what the store uses), acting as "
        "min_free_disk_bytes does. Below map_size_bytes.",
    )
    min_free_segments: int = _setting(
        16,
        "segments",
        "Segment slots (of max_segments) kept for the rolls of existing replicas: the controller places a new "
        "replica on a node only if this many stay free after it, and below it the node refuses Produce as when "
        "the disk is low. Below max_segments.",
    )

    replica_replace_after_ms: int = _setting(
        30_000,
        "ms",
        "How long the member-list must have declared a node dead (or gone) before the controller re-creates "
        "its replicas on other nodes.",
    )
    rebalance_interval_ms: int = _setting(
        1_000,
        "ms",
        "How often the controller leader advances replica moves and plans new ones (repair, drain, balance).",
    )
    max_concurrent_moves: int = _setting(4, "moves", "Replica moves in flight at once across the cluster.")
    move_stall_s: float = _setting(
        120.0,
        "seconds",
        "A replica move whose new replica neither copies nor catches up for this long is aborted and planned "
        "again later, so that a stuck move cannot hold one of max_concurrent_moves for ever.",
    )
    move_bandwidth_mb_s: float = _setting(
        50.0,
        "MB/s",
        "Cluster-wide budget for copying segments to new replicas (0 = unlimited); each of the "
        "max_concurrent_moves moves gets an equal share (move_bandwidth_bytes_per_s).",
    )

    log_level: str = _setting("info", "level", "debug, info, warning or error.")
    log_format: str = _setting("text", "format", "text (key=value) or json.")

    # ------------------------------------------------------------------------------------------ derived

    @property
    def advertised_client_address(self) -> str:
        return self.advertise_client_address or self.client_address

    @property
    def advertised_peer_address(self) -> str:
        return self.advertise_peer_address or self.peer_address

    @property
    def heartbeat_interval_s(self) -> float:
        """Seconds between a leader's heartbeats, and between the peer transport's coalesced heartbeat frames."""
        return self.heartbeat_ticks * self.tick_ms / 1000

    @property
    def move_bandwidth_bytes_per_s(self) -> float:
        """One replica move's share of the cluster-wide copy budget, in bytes/s (0 = unlimited).

        The controller runs at most ``max_concurrent_moves`` moves at once, so shares that each copier keeps
        to add up to at most ``move_bandwidth_mb_s`` cluster-wide without copiers coordinating."""
        return self.move_bandwidth_mb_s * 1_000_000 / self.max_concurrent_moves

    def initial_members(self) -> dict[int, str]:
        """node id -> peer address of the initial cluster, in the configured order."""
        members: dict[int, str] = {}
        for item in self.initial_cluster:
            node_id, sep, address = item.partition("=")
            if not sep or not node_id.strip().isdigit():
                raise ConfigError("initial_cluster", f"expected ID=host:port, got {item!r}")
            parse_address(address.strip(), "initial_cluster")
            members[int(node_id)] = address.strip()
        return members

    def validate(self) -> Self:
        """Return self, or raise :class:`ConfigError` naming the first wrong key."""
        if self.node_id < 1:
            raise ConfigError("node_id", f"must be an integer >= 1, got {self.node_id}")
        if not self.data_dir:
            raise ConfigError("data_dir", "is required")
        for key in ("client_address", "peer_address", "gossip_address"):
            parse_address(getattr(self, key), key)
        for key in ("advertise_client_address", "advertise_peer_address"):
            if getattr(self, key):
                parse_address(getattr(self, key), key)
        for seed in self.seeds:
            parse_address(seed, "seeds")
        members = self.initial_members()
        if len(members) != len(self.initial_cluster):
            raise ConfigError("initial_cluster", "lists a node id twice")
        if members and self.node_id in members and members[self.node_id] != self.advertised_peer_address:
            raise ConfigError(
                "initial_cluster",
                f"says node {self.node_id} is at {members[self.node_id]}, but its peer address is "
                f"{self.advertised_peer_address}",
            )
        if not self.cluster_id or len(self.cluster_id) > 64:
            raise ConfigError("cluster_id", "must be 1..64 characters")
        if self.controller_replicas not in (1, 3, 5, 7):
            raise ConfigError("controller_replicas", f"must be 1, 3, 5 or 7, got {self.controller_replicas}")
        for key in ("max_batch_bytes", "max_offsets_commit_bytes"):
            if getattr(self, key) > MAX_STORABLE_BATCH_BYTES:
                raise ConfigError(
                    key,
                    f"must be at most {MAX_STORABLE_BATCH_BYTES} (the log store's max_entry_bytes "
                    f"{StorageConfig().max_entry_bytes} less its {ENTRY_OVERHEAD_BYTES}-byte entry header): a larger "
                    f"entry could not be stored; got {getattr(self, key)}",
                )
        ranges: dict[str, tuple[float, float]] = {
            "tick_ms": (1, 10_000),
            "election_ticks": (3, 1_000),
            "heartbeat_ticks": (1, 1_000),
            "max_inflight_bytes": (64 * KiB, 4 * GiB),
            "max_append_bytes": (64 * KiB, 1 * GiB),
            "max_frame_bytes": (2 * MiB, 2 * GiB - 1),  # a catch-up segment chunk (1 MiB) fits
            "max_batch_bytes": (1 * KiB, MAX_STORABLE_BATCH_BYTES),
            "produce_timeout_ms": (1, 3_600_000),
            "fetch_max_bytes": (1, 1 * GiB),
            "fetch_max_wait_ms": (0, 3_600_000),
            "default_replication_factor": (1, 7),
            "default_partitions": (1, 100_000),
            "max_topic_partitions": (1, 100_000),
            "offsets_partitions": (1, 1_000),
            "max_offsets_per_commit": (1, 1_000_000),
            "max_offsets_commit_bytes": (1 * KiB, MAX_STORABLE_BATCH_BYTES),
            "max_request_bytes": (1 * MiB, 2 * GiB - 1),
            "max_request_items": (1, 10_000_000),
            "max_request_string_chars": (255, 1 * MiB),
            "fetch_max_bytes_limit": (1 * KiB, 1 * GiB),
            "max_inflight_produce_bytes": (1 * KiB, 1 << 40),
            "max_stream_inflight_bytes": (1 * KiB, 1 << 40),
            "max_concurrent_streams": (1, 1_000_000),
            "max_concurrent_rpcs": (1, 1_000_000),
            "max_client_connections": (1, 1_000_000),
            "max_peer_connections": (2, 1_000_000),
            "max_peer_requests_per_connection": (1, 1_000_000),
            "producer_id_block": (1, 1_000_000),
            "retention_check_ms": (10, 3_600_000),
            "leader_balance_ms": (100, 3_600_000),
            "map_size_bytes": (16 * MiB, 1 << 50),
            "max_segments": (16, 1_000_000),
            "min_free_disk_bytes": (0, 1 << 50),
            "min_free_map_bytes": (0, 1 << 50),
            "min_free_segments": (0, 1_000_000),
            "replica_replace_after_ms": (0, 86_400_000),
            "max_concurrent_moves": (1, 1_000),
            "move_stall_s": (1, 86_400),
            "move_bandwidth_mb_s": (0, 100_000),
            "rebalance_interval_ms": (10, 3_600_000),
            "scrub_bytes_per_s": (0, 64 * GiB),
        }
        for key, (low, high) in ranges.items():
            value = getattr(self, key)
            if not low <= value <= high:
                raise ConfigError(key, f"must be in [{low:g}, {high:g}], got {value}")
        if self.min_free_segments >= self.max_segments:
            raise ConfigError("min_free_segments", f"must be below max_segments ({self.max_segments})")
        if self.min_free_map_bytes >= self.map_size_bytes:
            raise ConfigError("min_free_map_bytes", f"must be below map_size_bytes ({self.map_size_bytes})")
        if self.default_partitions > self.max_topic_partitions:
            raise ConfigError("default_partitions", "must not exceed max_topic_partitions")
        self._validate_request_limits()
        if self.heartbeat_ticks >= self.election_ticks:
            raise ConfigError("heartbeat_ticks", "must be smaller than election_ticks")
        if self.election_ticks < _MIN_ELECTION_HEARTBEATS * self.heartbeat_ticks:
            raise ConfigError(
                "election_ticks",
                f"must be at least {_MIN_ELECTION_HEARTBEATS}x heartbeat_ticks ({self.heartbeat_ticks}): a coalesced "
                f"heartbeat may wait one heartbeat interval before it leaves, got {self.election_ticks}",
            )
        largest_append = self.max_append_bytes + self.max_batch_bytes + _APPEND_OVERHEAD_BYTES
        if self.max_frame_bytes < largest_append:
            raise ConfigError(
                "max_frame_bytes",
                f"must hold an append message: at least max_append_bytes + max_batch_bytes + 64 KiB "
                f"({largest_append}), got {self.max_frame_bytes}",
            )
        if self.membership_profile not in ("lan", "local"):
            raise ConfigError("membership_profile", f"must be lan or local, got {self.membership_profile!r}")
        if self.log_level not in ("debug", "info", "warning", "error"):
            raise ConfigError("log_level", f"must be debug, info, warning or error, got {self.log_level!r}")
        if self.log_format not in ("text", "json"):
            raise ConfigError("log_format", f"must be text or json, got {self.log_format!r}")
        return self

    def _validate_request_limits(self) -> None:
        """Limits of the client front door that must leave room for what other keys allow."""
        needed = self.max_batch_bytes + _REQUEST_OVERHEAD_BYTES
        if self.max_request_bytes < needed:
            raise ConfigError(
                "max_request_bytes",
                f"must hold the largest batch: at least max_batch_bytes + 64 KiB ({needed}), "
                f"got {self.max_request_bytes}",
            )
        if self.max_concurrent_streams < self.max_topic_partitions:
            raise ConfigError(
                "max_concurrent_streams",
                f"must be at least max_topic_partitions ({self.max_topic_partitions}): a consumer reading every "
                f"partition of a topic from one node holds a stream for each, got {self.max_concurrent_streams}",
            )
        for key in ("max_topic_partitions", "max_offsets_per_commit"):
            if self.max_request_items < getattr(self, key):
                raise ConfigError(
                    "max_request_items",
                    f"must be at least {key} ({getattr(self, key)}), got {self.max_request_items}",
                )
        if self.fetch_max_bytes > self.fetch_max_bytes_limit:
            raise ConfigError(
                "fetch_max_bytes", f"must not exceed fetch_max_bytes_limit ({self.fetch_max_bytes_limit})"
            )
        for key in ("max_inflight_produce_bytes", "max_stream_inflight_bytes"):
            if getattr(self, key) < self.max_batch_bytes:
                raise ConfigError(key, f"must hold one batch: at least max_batch_bytes ({self.max_batch_bytes})")


@dataclass(frozen=True)
class NodeConfig(SecuritySettings, ConsumerGroupConfig, PlacementConfig, _NodeSettings):
    """Everything a node needs to start. Only ``node_id`` and ``data_dir`` have no usable default."""

    def validate(self) -> Self:
        """Return self, or raise :class:`ConfigError` naming the first wrong key."""
        super().validate()
        self.validate_groups()
        self.validate_placement()
        self.validate_security(
            {
                key: parse_address(getattr(self, key), key)[0]
                for key in ("client_address", "peer_address", "gossip_address")
            }
        )
        return self


_FIELDS = {f.name: f for f in fields(NodeConfig)}


def _convert(key: str, value: Any, from_text: bool) -> Any:
    """Coerce a TOML, environment or flag value to the field's type, naming ``key`` on failure."""
    kind = typing.get_type_hints(NodeConfig)[key]
    origin = typing.get_origin(kind)
    try:
        if kind is bool:
            if from_text:
                lowered = str(value).strip().lower()
                if lowered not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(value)
                return lowered in ("true", "1", "yes")
            if not isinstance(value, bool):
                raise TypeError(value)
            return value
        if kind is int:
            if isinstance(value, bool) or (not from_text and not isinstance(value, int)):
                raise TypeError(value)
            return int(str(value).replace("_", "")) if from_text else value
        if kind is float:
            if isinstance(value, bool):
                raise TypeError(value)
            return float(value)
        if kind is str:
            if not from_text and not isinstance(value, str):
                raise TypeError(value)
            return str(value)
        if origin is tuple:
            if from_text and isinstance(value, str):
                return tuple(item.strip() for item in value.split(",") if item.strip())
            if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
                raise TypeError(value)
            return tuple(value)
    except (TypeError, ValueError):
        expected = "a list of strings" if origin is tuple else getattr(kind, "__name__", str(kind))
        raise ConfigError(key, f"expected {expected}, got {value!r}") from None
    raise ConfigError(key, f"unsupported type {kind}")  # pragma: no cover - every field is handled above


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> NodeConfig:
    """TOML file, then ``MULTIRAFT_*`` variables, then ``overrides`` (flags); validated."""
    values: dict[str, Any] = {}
    if path is not None:
        try:
            with Path(path).open("rb") as handle:
                document = tomllib.load(handle)
        except OSError as exc:
            raise ConfigError("config", f"cannot read {path}: {exc.strerror or exc}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError("config", f"{path} is not valid TOML: {exc}") from exc
        for key, value in document.items():
            if key not in _FIELDS:
                raise ConfigError(key, f"unknown key in {path}")
            values[key] = _convert(key, value, from_text=False)
    environ = os.environ if environ is None else environ
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or name in IGNORED_VARIABLES or name.startswith(DEBUG_PREFIX):
            continue
        key = name[len(ENV_PREFIX) :].lower()
        if key not in _FIELDS:
            raise ConfigError(key, f"unknown key (from the variable {name})")
        values[key] = _convert(key, value, from_text=True)
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key not in _FIELDS:
            raise ConfigError(key, "unknown key")
        values[key] = _convert(key, value, from_text=isinstance(value, str))
    return replace(NodeConfig(), **values).validate()


def config_reference() -> str:
    """A Markdown table of every key: unit, default and meaning (for docs/configuration.md)."""
    lines = [
        "| key | unit | default | meaning |",
        "|---|---|---|---|",
    ]
    defaults = NodeConfig()
    for f in fields(NodeConfig):
        default = getattr(defaults, f.name)
        shown = "(required)" if f.name in ("node_id", "data_dir") else repr(default)
        lines.append(f"| `{f.name}` | {f.metadata['unit']} | `{shown}` | {f.metadata['doc']} |")
    return "\n".join(lines) + "\n"
