"""Encodings of controller commands and snapshots.

A command is one compact JSON object (ASCII, sorted keys) with a format version ``v`` and a type tag ``t``::

    {"t":"create_topic","v":1,"name":"orders","configs":{"segment.bytes":"1073741824",...},
     "assignments":[[[1,2,3],1],[[2,3,1],2]],"internal":false,"created_ms":1700000000000}

Other tags: ``register_node`` (``node``), ``delete_topic`` (``name``, ``internal``), ``alter_topic_configs``
(``name``, ``set``, ``delete``), ``set_partition_replicas`` (``topic``, ``partition``, ``replicas``,
``learners``, ``preferred_leader``, ``expected_replicas``, ``expected_learners``: a list or null),
``set_node_state`` (``node_id``, ``state``), ``allocate_producer_ids`` (``count``, and ``principal`` when it
is bound to one), ``alter_cluster_configs`` (``set``, ``delete``) and ``create_partitions`` (``name``,
``total``, ``assignments`` of the new partitions); code older than a command type stops on it as a command
from newer code, as for any new type. The security commands are in :mod:`._security_codec`. A node is
``{"id","client","peer","gossip","rack","capacity","state"}`` with the state in lower case, and ``"host"`` when
the node has one (absent when empty, so that logs and snapshots written before hosts existed still load and
clusters without hosts write the same bytes as before).

A snapshot is a 9-byte header (written and read with :mod:`storage.binary`), ``b"MRCS"``, format version (u8)
and the CRC-32 of the body (u32, little endian), then the body: zlib-compressed JSON of the whole state with
nodes sorted by id, topics by name, and each partition as ``[group_id, replicas, learners, preferred_leader]``,
and ``cluster_configs`` (a string map) only when some dynamic cluster setting is set, so that other snapshots
keep their bytes. Equal states give equal bytes.

Decoding checks every field's type and the exact set of keys, so a decoded value is always well typed; whether
it makes sense (a known node, a valid name) is for apply() to judge. Malformed input raises
:class:`CommandDecodeError` and nothing else; input from a newer format version, or a command type this code
does not know, raises its subclass :class:`UnsupportedVersionError`.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, NoReturn

from storage.binary import BinaryDecodeError, BinaryEncodeError, Reader, Writer

from ._model import (
    AllocateProducerIds,
    AlterClusterConfigs,
    AlterTopicConfigs,
    ClusterState,
    Command,
    CreatePartitions,
    CreateTopic,
    DeleteTopic,
    NodeInfo,
    NodeState,
    PartitionState,
    RegisterNode,
    SetNodeState,
    SetPartitionReplicas,
    Topic,
)
from ._security_codec import (
    SECURITY_TAGS,
    decode_security,
    decode_security_command,
    encode_security_command,
    security_obj,
)
from .errors import CommandDecodeError, CommandEncodeError, UnsupportedVersionError
from .security import SECURITY_COMMAND_TYPES

__all__ = [
    "COMMAND_FORMAT_VERSION",
    "SNAPSHOT_FORMAT_VERSION",
    "encode_command",
    "decode_command",
    "encode_snapshot",
    "decode_snapshot",
]

COMMAND_FORMAT_VERSION = 1
SNAPSHOT_FORMAT_VERSION = 1
SNAPSHOT_MAGIC = b"MRCS"
_SNAPSHOT_HEADER = struct.Struct("<4sBI")
_MAX_SNAPSHOT_JSON_BYTES = 1 << 30  # a bound on decompression, far above any real cluster's metadata
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_NODE_STATES = {s.value: s for s in NodeState}


# ------------------------------------------------------------------------------------------------ commands


def encode_command(command: Command) -> bytes:
    """The bytes to propose for ``command``. Raises :class:`CommandEncodeError` for unencodable values."""
    encoder = _COMMAND_ENCODERS.get(type(command))
    if encoder is None:
        raise CommandEncodeError(f"not a controller command: {type(command).__name__}")
    try:
        obj = {"v": COMMAND_FORMAT_VERSION, "t": _TAGS[type(command)], **encoder(command)}
        # Decoding what we encode catches every value the decoder would refuse (wrong types, huge ints)
        # here, at the proposer, rather than at every replica.
        _decode_command_obj(obj)
        return _dumps(obj)
    except (CommandDecodeError, ValueError, TypeError, AttributeError) as exc:
        raise CommandEncodeError(f"cannot encode {type(command).__name__}: {exc}") from exc


def decode_command(data: bytes | bytearray | memoryview) -> Command:
    """The command encoded in ``data``; :class:`CommandDecodeError` if it is not one."""
    return _decode_command_obj(_loads(data, "command"))


def _node_obj(node: NodeInfo) -> dict[str, Any]:
    return {
        "id": node.node_id,
        "client": node.client_address,
        "peer": node.peer_address,
        "gossip": node.gossip_address,
        "rack": node.rack,
        "capacity": node.capacity,
        "state": NodeState(node.state).value,
        **({"host": node.host} if node.host else {}),
    }


def _opt_list(nodes: tuple[int, ...] | None) -> list[int] | None:
    return None if nodes is None else list(nodes)


_COMMAND_ENCODERS: dict[type, Callable[[Any], dict[str, Any]]] = {
    RegisterNode: lambda c: {"node": _node_obj(c.node)},
    CreateTopic: lambda c: {
        "name": c.name,
        "configs": dict(c.configs),
        "assignments": [[list(replicas), leader] for replicas, leader in c.assignments],
        "internal": c.internal,
        "created_ms": c.created_ms,
    },
    DeleteTopic: lambda c: {"name": c.name, "internal": c.internal},
    AlterTopicConfigs: lambda c: {"name": c.name, "set": dict(c.set), "delete": list(c.delete)},
    SetPartitionReplicas: lambda c: {
        "topic": c.topic,
        "partition": c.partition,
        "replicas": list(c.replicas),
        "learners": list(c.learners),
        "preferred_leader": c.preferred_leader,
        "expected_replicas": _opt_list(c.expected_replicas),
        "expected_learners": _opt_list(c.expected_learners),
    },
    SetNodeState: lambda c: {"node_id": c.node_id, "state": NodeState(c.state).value},
    AllocateProducerIds: lambda c: {"count": c.count, **({"principal": c.principal} if c.principal else {})},
    AlterClusterConfigs: lambda c: {"set": dict(c.set), "delete": list(c.delete)},
    **dict.fromkeys(SECURITY_COMMAND_TYPES, encode_security_command),
    # adding partitions (issue 25)
    CreatePartitions: lambda c: {
        "name": c.name,
        "total": c.total,
        "assignments": [[list(replicas), leader] for replicas, leader in c.assignments],
    },
}
_TAGS: dict[type, str] = {
    RegisterNode: "register_node",
    CreateTopic: "create_topic",
    DeleteTopic: "delete_topic",
    AlterTopicConfigs: "alter_topic_configs",
    SetPartitionReplicas: "set_partition_replicas",
    SetNodeState: "set_node_state",
    AllocateProducerIds: "allocate_producer_ids",
    AlterClusterConfigs: "alter_cluster_configs",
    **SECURITY_TAGS,
    CreatePartitions: "create_partitions",  # adding partitions (issue 25)
}


def _decode_command_obj(obj: Any) -> Command:
    if not isinstance(obj, dict):
        _fail("command", "is not a JSON object")
    version = obj.get("v")
    if type(version) is not int:
        _fail("command.v", "is missing or not an integer")
    if version > COMMAND_FORMAT_VERSION:
        raise UnsupportedVersionError(f"command format version {version}; this code reads up to 1")
    if version < 1:
        _fail("command.v", f"unknown version {version}")
    tag = obj.get("t")
    if not isinstance(tag, str):
        _fail("command.t", "is missing or not a string")
    decoder = _COMMAND_DECODERS.get(tag)
    if decoder is None:
        security = decode_security_command(tag, {k: v for k, v in obj.items() if k not in {"v", "t"}})
        if security is not None:
            return security
        raise UnsupportedVersionError(f"unknown command type {tag[:64]!r} (written by newer code?)")
    fields = {k: v for k, v in obj.items() if k not in {"v", "t"}}
    return decoder(_Obj(fields, tag))


class _Obj:
    """Typed, strict access to one JSON object; errors name the path of the bad field."""

    def __init__(self, value: Any, path: str, keys: tuple[str, ...] | None = None) -> None:
        if not isinstance(value, dict):
            _fail(path, "is not a JSON object")
        self.value: dict[str, Any] = value
        self.path = path
        if keys is not None:
            self.exactly(*keys)

    def exactly(self, *keys: str) -> _Obj:
        if set(self.value) != set(keys):
            extra = sorted(set(self.value) - set(keys))
            missing = sorted(set(keys) - set(self.value))
            _fail(self.path, f"has unexpected keys {extra[:5]} or lacks keys {missing}")
        return self

    def integer(self, key: str) -> int:
        return _int(self.value[key], f"{self.path}.{key}")

    def string(self, key: str) -> str:
        return _str(self.value[key], f"{self.path}.{key}")

    def flag(self, key: str) -> bool:
        value = self.value[key]
        if type(value) is not bool:
            _fail(f"{self.path}.{key}", "is not a boolean")
        return value

    def ints(self, key: str) -> tuple[int, ...]:
        return _ints(self.value[key], f"{self.path}.{key}")

    def optional_ints(self, key: str) -> tuple[int, ...] | None:
        value = self.value[key]
        return None if value is None else _ints(value, f"{self.path}.{key}")

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.value[key]
        if not isinstance(value, list):
            _fail(f"{self.path}.{key}", "is not a list")
        return tuple(_str(item, f"{self.path}.{key}[]") for item in value)

    def str_map(self, key: str) -> dict[str, str]:
        value = self.value[key]
        if not isinstance(value, dict):
            _fail(f"{self.path}.{key}", "is not a JSON object")
        return {k: _str(v, f"{self.path}.{key}.{k[:64]}") for k, v in value.items()}

    def array(self, key: str) -> list[Any]:
        value = self.value[key]
        if not isinstance(value, list):
            _fail(f"{self.path}.{key}", "is not a list")
        return value

    def node(self, key: str) -> NodeInfo:
        return _decode_node(self.value[key], f"{self.path}.{key}")

    def node_state(self, key: str) -> NodeState:
        value = self.value[key]
        if not isinstance(value, str) or value not in _NODE_STATES:
            _fail(f"{self.path}.{key}", f"is not one of {sorted(_NODE_STATES)}")
        return _NODE_STATES[value]


def _fail(path: str, message: str) -> NoReturn:
    raise CommandDecodeError(f"{path} {message}")


def _int(value: Any, path: str) -> int:
    if type(value) is not int or not _INT64_MIN <= value <= _INT64_MAX:
        _fail(path, "is not a 64-bit integer")
    return value


def _str(value: Any, path: str) -> str:
    if not isinstance(value, str):
        _fail(path, "is not a string")
    return value


def _ints(value: Any, path: str) -> tuple[int, ...]:
    if not isinstance(value, list):
        _fail(path, "is not a list")
    return tuple(_int(item, f"{path}[]") for item in value)


def _decode_node(value: Any, path: str) -> NodeInfo:
    keys = ("id", "client", "peer", "gossip", "rack", "capacity", "state")
    obj = _Obj(value, path, (*keys, "host") if isinstance(value, dict) and "host" in value else keys)
    capacity = obj.value["capacity"]
    if type(capacity) not in (int, float) or not math.isfinite(capacity):
        _fail(f"{path}.capacity", "is not a finite number")
    return NodeInfo(
        node_id=obj.integer("id"),
        client_address=obj.string("client"),
        peer_address=obj.string("peer"),
        gossip_address=obj.string("gossip"),
        rack=obj.string("rack"),
        capacity=float(capacity),
        state=obj.node_state("state"),
        host=obj.string("host") if "host" in obj.value else "",
    )


def _decode_assignments(value: list[Any], path: str) -> tuple[tuple[tuple[int, ...], int], ...]:
    assignments = []
    for item in value:
        if not isinstance(item, list) or len(item) != 2:
            _fail(f"{path}[]", "is not a [replicas, preferred_leader] pair")
        assignments.append((_ints(item[0], f"{path}[].replicas"), _int(item[1], f"{path}[].preferred_leader")))
    return tuple(assignments)


_COMMAND_DECODERS: dict[str, Callable[[_Obj], Command]] = {
    "register_node": lambda o: RegisterNode(o.exactly("node").node("node")),
    "create_topic": lambda o: CreateTopic(
        name=o.exactly("name", "configs", "assignments", "internal", "created_ms").string("name"),
        configs=o.str_map("configs"),
        assignments=_decode_assignments(o.array("assignments"), f"{o.path}.assignments"),
        internal=o.flag("internal"),
        created_ms=o.integer("created_ms"),
    ),
    "delete_topic": lambda o: DeleteTopic(o.exactly("name", "internal").string("name"), o.flag("internal")),
    "alter_topic_configs": lambda o: AlterTopicConfigs(
        o.exactly("name", "set", "delete").string("name"), o.str_map("set"), o.strings("delete")
    ),
    "set_partition_replicas": lambda o: SetPartitionReplicas(
        topic=o.exactly(
            "topic",
            "partition",
            "replicas",
            "learners",
            "preferred_leader",
            "expected_replicas",
            "expected_learners",
        ).string("topic"),
        partition=o.integer("partition"),
        replicas=o.ints("replicas"),
        learners=o.ints("learners"),
        preferred_leader=o.integer("preferred_leader"),
        expected_replicas=o.optional_ints("expected_replicas"),
        expected_learners=o.optional_ints("expected_learners"),
    ),
    "set_node_state": lambda o: SetNodeState(o.exactly("node_id", "state").integer("node_id"), o.node_state("state")),
    "allocate_producer_ids": lambda o: AllocateProducerIds(
        o.exactly(*(("count", "principal") if "principal" in o.value else ("count",))).integer("count"),
        o.string("principal") if "principal" in o.value else "",
    ),
    # adding partitions (issue 25)
    "create_partitions": lambda o: CreatePartitions(
        name=o.exactly("name", "total", "assignments").string("name"),
        total=o.integer("total"),
        assignments=_decode_assignments(o.array("assignments"), f"{o.path}.assignments"),
    ),
    "alter_cluster_configs": lambda o: AlterClusterConfigs(
        o.exactly("set", "delete").str_map("set"), o.strings("delete")
    ),
}


# ----------------------------------------------------------------------------------------------- snapshots


def encode_snapshot(state: ClusterState) -> bytes:
    """The bytes of a snapshot of ``state``. Raises :class:`CommandEncodeError` for unencodable values."""
    try:
        obj = {
            "applied_index": state.applied_index,
            "version": state.version,
            "next_group_id": state.next_group_id,
            "next_producer_id": state.next_producer_id,
            "nodes": [_node_obj(state.nodes[n]) for n in sorted(state.nodes)],
            "topics": [_topic_obj(state.topics[name]) for name in sorted(state.topics)],
        }
        if not state.security.empty:  # absent when empty: snapshots of clusters without security are unchanged
            obj["security"] = security_obj(state.security)
        if state.cluster_configs:  # absent when empty, as security
            obj["cluster_configs"] = dict(state.cluster_configs)
        body = zlib.compress(_dumps(obj), 6)
        out = Writer()
        out.struct(_SNAPSHOT_HEADER, SNAPSHOT_MAGIC, SNAPSHOT_FORMAT_VERSION, zlib.crc32(body))
        out.put(body)
    except (BinaryEncodeError, ValueError, TypeError, AttributeError) as exc:
        raise CommandEncodeError(f"cannot encode the snapshot: {exc}") from exc
    return out.bytes()


def decode_snapshot(data: bytes | bytearray | memoryview) -> ClusterState:
    """The state in a snapshot. Malformed or inconsistent data raises :class:`CommandDecodeError`."""
    raw = _bytes(data, "snapshot")
    reader = Reader(raw, "snapshot")
    try:
        magic, version, crc = reader.struct(_SNAPSHOT_HEADER, "header")
    except BinaryDecodeError as exc:
        raise CommandDecodeError(str(exc)) from exc
    if magic != SNAPSHOT_MAGIC:
        _fail("snapshot", "does not start with the controller snapshot magic")
    if version > SNAPSHOT_FORMAT_VERSION:
        raise UnsupportedVersionError(f"snapshot format version {version}; this code reads up to 1")
    if version < 1:
        _fail("snapshot", f"has unknown format version {version}")
    body = raw[reader.at :]
    if zlib.crc32(body) != crc:
        _fail("snapshot", "fails its CRC check")
    try:
        inflater = zlib.decompressobj()
        text = inflater.decompress(body, _MAX_SNAPSHOT_JSON_BYTES)
        if inflater.unconsumed_tail:
            _fail("snapshot", f"inflates to more than {_MAX_SNAPSHOT_JSON_BYTES} bytes")
        if not inflater.eof or inflater.unused_data:
            _fail("snapshot", "has a truncated or overlong compressed body")
    except zlib.error as exc:
        raise CommandDecodeError(f"snapshot body does not inflate: {exc}") from exc
    state = _decode_state(_loads(text, "snapshot"))
    problems = state.invariant_violations()
    if problems:
        _fail("snapshot", f"holds an inconsistent state: {'; '.join(problems[:3])}")
    return state


def _topic_obj(topic: Topic) -> dict[str, Any]:
    return {
        "name": topic.name,
        "internal": topic.internal,
        "created_ms": topic.created_ms,
        "configs": dict(topic.configs),
        "partitions": [[p.group_id, list(p.replicas), list(p.learners), p.preferred_leader] for p in topic.partitions],
    }


def _decode_state(value: Any) -> ClusterState:
    keys: tuple[str, ...] = ("applied_index", "version", "next_group_id", "next_producer_id", "nodes", "topics")
    for optional in ("security", "cluster_configs"):
        if isinstance(value, dict) and optional in value:
            keys = (*keys, optional)
    obj = _Obj(value, "snapshot", keys)
    nodes: dict[int, NodeInfo] = {}
    for item in obj.array("nodes"):
        node = _decode_node(item, "snapshot.nodes[]")
        if node.node_id in nodes:
            _fail("snapshot.nodes", f"lists node {node.node_id} twice")
        nodes[node.node_id] = node
    topics: dict[str, Topic] = {}
    for item in obj.array("topics"):
        topic = _decode_topic(item)
        if topic.name in topics:
            _fail("snapshot.topics", f"lists topic {topic.name[:64]!r} twice")
        topics[topic.name] = topic
    state = ClusterState(
        nodes=nodes,
        topics=topics,
        next_group_id=obj.integer("next_group_id"),
        next_producer_id=obj.integer("next_producer_id"),
        applied_index=obj.integer("applied_index"),
        version=obj.integer("version"),
    )
    if "security" in obj.value:
        state = replace(state, security=decode_security(obj.value["security"]))
    if "cluster_configs" in obj.value:
        state = replace(state, cluster_configs=obj.str_map("cluster_configs"))
    return state


def _decode_topic(value: Any) -> Topic:
    obj = _Obj(value, "snapshot.topics[]", ("name", "internal", "created_ms", "configs", "partitions"))
    name = obj.string("name")
    partitions = []
    for number, item in enumerate(obj.array("partitions")):
        path = f"snapshot.topics[{name[:64]!r}].partitions[{number}]"
        if not isinstance(item, list) or len(item) != 4:
            _fail(path, "is not [group_id, replicas, learners, preferred_leader]")
        group_id, replicas, learners, preferred = item
        partitions.append(
            PartitionState(
                name,
                number,
                _int(group_id, f"{path}.group_id"),
                _ints(replicas, f"{path}.replicas"),
                _ints(learners, f"{path}.learners"),
                _int(preferred, f"{path}.preferred_leader"),
            )
        )
    return Topic(name, tuple(partitions), obj.str_map("configs"), obj.flag("internal"), obj.integer("created_ms"))


# -------------------------------------------------------------------------------------------------- JSON


def _dumps(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("ascii")


def _bytes(data: Any, what: str) -> bytes:
    if not isinstance(data, bytes | bytearray | memoryview):
        _fail(what, f"is a {type(data).__name__}, not bytes")
    return bytes(data)


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def _loads(data: Any, what: str) -> Any:
    raw = _bytes(data, what)
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise CommandDecodeError(f"{what} is not UTF-8: {exc}") from exc
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError; so is a 5000-digit int
        raise CommandDecodeError(f"{what} is not valid JSON: {str(exc)[:200]}") from exc
