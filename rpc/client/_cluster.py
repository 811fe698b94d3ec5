"""Connections to a cluster: bootstrap, a metadata cache, routing to partition leaders, and retries.

:class:`ClusterClient` is the layer the public Producer, Consumer and Admin stand on. A call addressed to a
partition goes to its leader; on ``NOT_LEADER`` it follows the leader hint (or refreshes metadata), on an
unreachable node it refreshes metadata and tries again, until the call's deadline. The caller sees the
answer or one typed :class:`multiraft.errors.MultiraftError`.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc

from multiraft.errors import (
    ConnectionFailedError,
    MultiraftError,
    NotLeaderError,
    RequestTimeoutError,
    UnavailableError,
    UnknownPartitionError,
    UnknownTopicError,
)
from rpc.client._auth import AuthInterceptor, TokenSource, aio_interceptors
from rpc.client._tls import TlsSettings, open_aio_channel, open_channel, tls_hint
from rpc.proto import multiraft_pb2 as pb
from rpc.proto import multiraft_pb2_grpc as pb_grpc
from rpc.proto.status import from_rpc_error

__all__ = ["CHANNEL_OPTIONS", "ClusterClient", "Metadata", "TopicMetadata", "PartitionMetadata", "parse_bootstrap"]

Response = TypeVar("Response")

_MAX_MESSAGE_BYTES = 256 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
    # A restarted node is reachable again within a second, not after gRPC's default 2-minute backoff.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]
_BACKOFF_START_S = 0.02
_BACKOFF_MAX_S = 0.5
# A client that never reached a node gives up this soon once every address refuses the connection (rpk and
# kcat fail at once; a second covers a node that is just binding its port).
REFUSED_GRACE_S = 1.0


def parse_bootstrap(bootstrap: str | Sequence[str]) -> list[str]:
    """``"host:port,host:port"`` or a list of addresses -> addresses."""
    items = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    addresses = [item.strip() for item in items if item.strip()]
    if not addresses:
        raise ValueError("bootstrap needs at least one host:port")
    for address in addresses:
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"bootstrap address must be host:port, got {address!r}")
    return addresses


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    partition: int
    leader: int  # 0 when unknown
    replicas: tuple[int, ...]
    preferred_leader: int


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    partitions: tuple[PartitionMetadata, ...]
    configs: dict[str, str]


@dataclass(frozen=True, slots=True)
class Metadata:
    nodes: dict[int, str]  # node id -> client address
    topics: dict[str, TopicMetadata]
    controller_id: int
    fetched_at: float
    racks: dict[int, str] = field(default_factory=dict)  # node id -> rack, for the nodes that know theirs


class ClusterClient:
    """Thread-safe. One gRPC channel per node, opened on first use.

    ``connect_timeout_s`` bounds how long a call keeps trying while no node has ever answered this client (a
    wrong or dead bootstrap then fails after it with "no node reachable at ...", not after the request
    timeout); None leaves the request timeout alone. Once a node has answered, outages are retried up to the
    request timeout (a cluster restarting under a running client).

    ``tls``: reach the nodes over TLS (None: plaintext); every channel of the client, including the
    producer's and the consumer's streams, uses it.

    ``user`` and ``password``: authenticate with SCRAM-SHA-256 and send the token with every call (renewed
    before it expires); None: no credentials (a cluster without authentication, or mutual TLS).
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        request_timeout_s: float = 30.0,
        metadata_max_age_s: float = 300.0,
        connect_timeout_s: float | None = None,
        tls: TlsSettings | None = None,
        user: str | None = None,
        password: str | None = None,
    ) -> None:
        self._bootstrap = parse_bootstrap(bootstrap)
        self.tls = tls
        self.credentials = tls.credentials() if tls is not None else None
        if (user is None) != (password is None):
            raise ValueError("user and password go together")
        self._raw_channels: dict[str, grpc.Channel] = {}  # without the token interceptor (authenticating)
        self.token_source: TokenSource | None = None
        if user is not None and password is not None:
            self.token_source = TokenSource(
                user, password, lambda: self._candidates(()), self._raw_channel, min(request_timeout_s, 10.0)
            )
        self.request_timeout_s = request_timeout_s
        self._metadata_max_age_s = metadata_max_age_s
        self._connect_timeout_s = connect_timeout_s
        self._reached = False  # some node has answered (even with an error)
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}
        self._metadata: Metadata | None = None
        self._leaders: dict[tuple[str, int], int] = {}  # learned from NOT_LEADER hints
        self._closed = False

    def close(self) -> None:
        with self._lock:
            self._closed = True
            channels, self._channels = self._channels, {}
            raw, self._raw_channels = self._raw_channels, {}
        for channel in [*channels.values(), *raw.values()]:
            channel.close()

    def __enter__(self) -> ClusterClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------------------------------- channels

    def channel(self, address: str) -> grpc.Channel:
        """The channel to ``address``; its calls carry this client's credentials."""
        if self.token_source is None:
            return self._raw_channel(address)
        with self._lock:
            channel = self._channels.get(address)
        if channel is None:
            channel = grpc.intercept_channel(self._raw_channel(address), AuthInterceptor(self.token_source))
            with self._lock:
                channel = self._channels.setdefault(address, channel)
        return channel

    def _raw_channel(self, address: str) -> grpc.Channel:
        with self._lock:
            if self._closed:
                raise ConnectionFailedError("the client is closed")
            channel = self._raw_channels.get(address)
            if channel is None:
                channel = open_channel(address, CHANNEL_OPTIONS, self.credentials)
                self._raw_channels[address] = channel
            return channel

    def aio_interceptors(self) -> list[Any]:
        """Interceptors that give a ``grpc.aio`` channel this client's SCRAM token (none without a user)."""
        return aio_interceptors(self.token_source)

    def aio_channel(self, address: str, options: Sequence[tuple[str, Any]] = CHANNEL_OPTIONS) -> grpc.aio.Channel:
        """A new ``grpc.aio`` channel to ``address`` with this client's security (the caller closes it)."""
        return open_aio_channel(address, options, self.credentials, self.aio_interceptors())

    def log_stub(self, address: str) -> pb_grpc.LogStub:
        return pb_grpc.LogStub(self.channel(address))

    def admin_stub(self, address: str) -> pb_grpc.AdminStub:
        return pb_grpc.AdminStub(self.channel(address))

    # ----------------------------------------------------------------------------------------- metadata

    def metadata(self, *, refresh: bool = False) -> Metadata:
        """The cached cluster metadata, fetched from any reachable node when missing, stale or asked."""
        cached = self._metadata
        if cached is not None and not refresh and time.monotonic() - cached.fetched_at < self._metadata_max_age_s:
            return cached
        response = self.call_any(lambda stub, timeout: stub.Metadata(pb.MetadataRequest(), timeout=timeout))
        metadata = Metadata(
            nodes={node.node_id: node.client_address for node in response.nodes},
            topics={
                topic.name: TopicMetadata(
                    topic.name,
                    tuple(
                        PartitionMetadata(p.partition, p.leader, tuple(p.replicas), p.preferred_leader)
                        for p in topic.partitions
                    ),
                    dict(topic.configs),
                )
                for topic in response.topics
            },
            controller_id=response.controller_id,
            fetched_at=time.monotonic(),
            racks={node.node_id: node.rack for node in response.nodes if node.rack},
        )
        with self._lock:
            self._metadata = metadata
            self._leaders = {}
        return metadata

    def topic(self, name: str, *, refresh: bool = False) -> TopicMetadata:
        metadata = self.metadata(refresh=refresh)
        found = metadata.topics.get(name)
        if found is None and not refresh:
            found = self.metadata(refresh=True).topics.get(name)
        if found is None:
            # Asked by name, a cluster with ACLs says whether the topic is hidden from this principal
            # (AUTHORIZATION_FAILED, as Kafka's TOPIC_AUTHORIZATION_FAILED) rather than absent.
            named = pb.MetadataRequest(topics=[name])
            with contextlib.suppress(UnknownTopicError):
                self.call_any(lambda stub, timeout: stub.Metadata(named, timeout=timeout))
                found = self.metadata(refresh=True).topics.get(name)
        if found is None:
            raise UnknownTopicError(f"unknown topic {name!r}", topic=name)
        return found

    def partition_count(self, topic: str) -> int:
        return len(self.topic(topic).partitions)

    def _leader_address(self, topic: str, partition: int) -> str | None:
        metadata = self.metadata()
        leader = self._leaders.get((topic, partition))
        if leader is None:
            found = metadata.topics.get(topic)
            if found is None:
                found = self.topic(topic, refresh=True)
                metadata = self.metadata()
            if not 0 <= partition < len(found.partitions):
                raise UnknownPartitionError(
                    f"topic {topic!r} has {len(found.partitions)} "
                    f"partition{'' if len(found.partitions) == 1 else 's'}, "
                    f"there is no partition {partition}",
                    topic=topic,
                    partition=partition,
                )
            leader = found.partitions[partition].leader or found.partitions[partition].preferred_leader
        return metadata.nodes.get(leader)

    def leader_address(self, topic: str, partition: int) -> str | None:
        """The address of the partition's leader (from the cache and leader hints; fetches metadata if needed)."""
        return self._leader_address(topic, partition)

    def cached_leader(self, topic: str, partition: int) -> str | None:
        """The address of the partition's leader as far as the cache knows, without any I/O (None if unknown)."""
        metadata = self._metadata
        if metadata is None:
            return None
        leader = self._leaders.get((topic, partition))
        if leader is None:
            found = metadata.topics.get(topic)
            if found is None or not 0 <= partition < len(found.partitions):
                return None
            leader = found.partitions[partition].leader or found.partitions[partition].preferred_leader
        return metadata.nodes.get(leader)

    def learn_leader(self, topic: str, partition: int, error: NotLeaderError) -> None:
        """Remember a NOT_LEADER answer's leader hint (or forget the cached leader when it has none)."""
        self._learn_leader(topic, partition, error)

    def refresh_metadata_quietly(self) -> None:
        """Refresh the metadata cache, ignoring failures (a caller's retry loop decides when to give up)."""
        self._refresh_quietly()

    def addresses(self) -> list[str]:
        """Where to send a call any node serves: known nodes (shuffled), then the bootstrap addresses."""
        return self._candidates(())

    def _learn_leader(self, topic: str, partition: int, error: NotLeaderError) -> None:
        with self._lock:
            if error.leader_id:
                self._leaders[(topic, partition)] = error.leader_id
            else:
                self._leaders.pop((topic, partition), None)

    # -------------------------------------------------------------------------------------------- calls

    def call_leader(
        self,
        topic: str,
        partition: int,
        call: Callable[[pb_grpc.LogStub, float], Response],
        *,
        timeout_s: float | None = None,
        max_attempts: int | None = None,
    ) -> Response:
        """Run ``call(stub, timeout)`` on the partition's leader, retrying through leader changes.

        ``max_attempts`` bounds the sends: a write that is not idempotent must not be sent twice, since a
        failure after the leader accepted it (it died before answering) does not say it was not written.
        """
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else self.request_timeout_s)
        backoff = _BACKOFF_START_S
        last: MultiraftError | None = None
        attempts = 0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RequestTimeoutError(f"{topic}/{partition}: no answer before the deadline ({last})")
            if max_attempts is not None and attempts >= max_attempts and last is not None:
                raise last
            attempts += 1
            address = self._leader_address(topic, partition)
            try:
                if address is None:
                    raise UnavailableError(f"no known leader for {topic}/{partition}")
                return call(self.log_stub(address), remaining)
            except grpc.RpcError as exc:
                last = from_rpc_error(exc)
            except MultiraftError as exc:
                last = exc
            if isinstance(last, NotLeaderError):
                self._learn_leader(topic, partition, last)
                if not last.leader_id:
                    self._refresh_quietly()
            elif last.retriable:
                self._refresh_quietly()
            else:
                raise last
            time.sleep(min(backoff, max(0.0, deadline - time.monotonic())))
            backoff = min(backoff * 2, _BACKOFF_MAX_S)

    def call_any(
        self,
        call: Callable[[pb_grpc.AdminStub, float], Response],
        *,
        timeout_s: float | None = None,
        prefer: Iterable[str] = (),
    ) -> Response:
        """Run an Admin call on any node that answers (known nodes first, then the bootstrap list)."""
        return self.call_any_node(
            lambda channel, timeout: call(pb_grpc.AdminStub(channel), timeout), timeout_s=timeout_s, prefer=prefer
        )

    def call_any_log(
        self, call: Callable[[pb_grpc.LogStub, float], Response], *, timeout_s: float | None = None
    ) -> Response:
        """Run a Log call that every node serves (producer ids, group offsets: a node forwards them)."""
        return self.call_any_node(lambda channel, timeout: call(pb_grpc.LogStub(channel), timeout), timeout_s=timeout_s)

    def call_any_node(
        self,
        call: Callable[[grpc.Channel, float], Response],
        *,
        timeout_s: float | None = None,
        prefer: Iterable[str] = (),
    ) -> Response:
        """Run ``call(channel, timeout)`` on any node that answers, retrying retriable errors until the
        deadline (known nodes first, shuffled, then the bootstrap list)."""
        started = time.monotonic()
        deadline = started + (timeout_s if timeout_s is not None else self.request_timeout_s)
        if not self._reached and self._connect_timeout_s is not None:
            deadline = min(deadline, started + self._connect_timeout_s)
        backoff = _BACKOFF_START_S
        last: MultiraftError = ConnectionFailedError(f"no node of {self._bootstrap} answered")
        while time.monotonic() < deadline:
            refused = True  # every address of this round refused the connection
            for address in self._candidates(prefer):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    response = call(self.channel(address), min(remaining, max(1.0, remaining / 2)))
                except grpc.RpcError as exc:
                    last = from_rpc_error(exc)
                    self._reached = self._reached or _answered_by_node(exc)
                    refused = refused and _unreachable_reason(last) == "connection refused"
                else:
                    self._reached = True
                    return response
                if not last.retriable:
                    raise last
            if refused and not self._reached and time.monotonic() - started >= REFUSED_GRACE_S:
                break
            time.sleep(min(backoff, max(0.0, deadline - time.monotonic())))
            backoff = min(backoff * 2, _BACKOFF_MAX_S)
        if not self._reached:
            raise ConnectionFailedError(
                f"no node reachable at {', '.join(self._bootstrap)} "
                f"({tls_hint(last.message, self.tls) or _unreachable_reason(last)})"
            ) from last
        if isinstance(last, UnavailableError) and not isinstance(last, ConnectionFailedError):
            raise ConnectionFailedError(f"no node of the cluster answered: {last.message}")
        raise last

    def _candidates(self, prefer: Iterable[str]) -> list[str]:
        known = list(self._metadata.nodes.values()) if self._metadata is not None else []
        random.shuffle(known)
        ordered: list[str] = []
        for address in [*prefer, *known, *self._bootstrap]:
            if address not in ordered:
                ordered.append(address)
        return ordered

    def _refresh_quietly(self) -> None:
        with contextlib.suppress(MultiraftError):  # the caller's retry loop decides when to give up
            self.metadata(refresh=True)


def _answered_by_node(exc: grpc.RpcError) -> bool:
    """Whether a node sent this error (it carries our error details), rather than the transport making it."""
    trailing: Any = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
    return any(str(key) == "grpc-status-details-bin" for key, _ in trailing or ())


def _unreachable_reason(error: MultiraftError) -> str:
    """The transport's long story cut to its cause, for "no node reachable at ... (cause)"."""
    text = error.message.lower()
    if "connection refused" in text:
        return "connection refused"
    if "domain name not found" in text or "dns resolution failed" in text or "name or service not known" in text:
        return "host name not found"
    if isinstance(error, RequestTimeoutError):
        return "no answer before the deadline"
    return error.message
