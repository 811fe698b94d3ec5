"""Topic configs: Kafka-style keys with string values, their schema, validation and typed view.

Topics store their configs as normalized strings (``"604800000"``, ``"CreateTime"``). Creating a topic pins
the keys that may never change (``segment.bytes``, ``segment.ms``) at their defaults when the request leaves
them out, so the value travels in the replicated command: every replica, whatever version of this code it
runs, then rolls segments at the same log positions. Other keys are stored only when set; reading them
through :func:`effective_topic_config` fills in the defaults.

Topic names follow Kafka: 1 to 249 characters of ``[a-zA-Z0-9._-]``, neither ``.`` nor ``..``. Names that
start with ``__`` are internal (``__consumer_offsets``): only the system creates them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

from .errors import InvalidConfigError, InvalidTopicNameError

__all__ = [
    "TimestampType",
    "CleanupPolicy",
    "TopicConfig",
    "ConfigKey",
    "RETENTION_MS",
    "RETENTION_BYTES",
    "SEGMENT_BYTES",
    "SEGMENT_MS",
    "MAX_MESSAGE_BYTES",
    "MESSAGE_TIMESTAMP_TYPE",
    "CLEANUP_POLICY",
    "MAX_TOPIC_NAME_LENGTH",
    "MAX_LOG_ENTRY_PAYLOAD_BYTES",
    "INTERNAL_TOPIC_PREFIX",
    "config_key",
    "validate_topic_configs",
    "effective_topic_config",
    "describe",
    "validate_topic_name",
    "ConfigSource",
    "ConfigEntry",
    "topic_config_entries",
]

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
DAY_MS = 24 * 3600 * 1000
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
# A record batch is one log entry: storage's max_entry_bytes (16 MiB) minus its 37-byte entry header. The
# controller is pure and cannot import storage; tests/controller/test_topic_config.py pins the two together.
MAX_LOG_ENTRY_PAYLOAD_BYTES = 16 * MiB - 37

RETENTION_MS = "retention.ms"
RETENTION_BYTES = "retention.bytes"
SEGMENT_BYTES = "segment.bytes"
SEGMENT_MS = "segment.ms"
MAX_MESSAGE_BYTES = "max.message.bytes"
MESSAGE_TIMESTAMP_TYPE = "message.timestamp.type"
CLEANUP_POLICY = "cleanup.policy"

MAX_TOPIC_NAME_LENGTH = 249
INTERNAL_TOPIC_PREFIX = "__"
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+", re.ASCII)
_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)


class TimestampType(StrEnum):
    """Which timestamp a record carries: the producer's, or the leader's clock when it appended the batch."""

    CREATE_TIME = "CreateTime"
    LOG_APPEND_TIME = "LogAppendTime"


class CleanupPolicy(StrEnum):
    """How old data goes away. Only deletion (by age and size) exists; compaction is not implemented."""

    DELETE = "delete"


@dataclass(frozen=True)
class ConfigKey:
    """The schema of one topic config key."""

    name: str
    type: str  # "int" or "enum"
    unit: str
    default: str
    doc: str
    alterable: bool
    minimum: int | None = None
    maximum: int | None = None
    special: tuple[int, ...] = ()  # values allowed outside [minimum, maximum], such as -1 for "no limit"
    choices: tuple[str, ...] = ()
    refused: Mapping[str, str] = field(default_factory=dict)  # values Kafka knows that we refuse, with why
    maximum_why: str = ""  # why the maximum is what it is, for the error

    def normalize(self, value: str) -> str:
        """The canonical string for ``value``, or :class:`InvalidConfigError` naming this key."""
        if not isinstance(value, str):
            raise InvalidConfigError(self.name, f"value must be a string, got {type(value).__name__}")
        text = value.strip()
        if text in self.refused:
            raise InvalidConfigError(self.name, f"{text!r} is not supported: {self.refused[text]}")
        if self.type == "enum":
            if text not in self.choices:
                raise InvalidConfigError(self.name, f"must be one of {', '.join(self.choices)}; got {value!r}")
            return text
        if not _INTEGER.fullmatch(text) or len(text) > 20:
            raise InvalidConfigError(self.name, f"must be an integer ({self.unit}); got {value!r}")
        number = int(text)
        if number in self.special:
            return str(number)
        if (self.minimum is not None and number < self.minimum) or (self.maximum is not None and number > self.maximum):
            why = f" ({self.maximum_why})" if self.maximum_why and number > (self.maximum or 0) else ""
            raise InvalidConfigError(self.name, f"must be {self.allowed}; got {number}{why}")
        return str(number)

    @property
    def allowed(self) -> str:
        """The allowed values in words, for errors and docs."""
        if self.type == "enum":
            return "one of " + ", ".join(self.choices)
        parts = [f"in [{self.minimum}, {self.maximum}]"]
        parts.extend(f"or {value}" for value in self.special)
        return " ".join(parts)


_KEYS: dict[str, ConfigKey] = {
    key.name: key
    for key in (
        ConfigKey(
            RETENTION_MS,
            "int",
            "milliseconds",
            str(7 * DAY_MS),
            "Sealed segments whose newest record is older than this are deleted; -1 keeps data forever.",
            alterable=True,
            minimum=0,
            maximum=_INT64_MAX,
            special=(-1,),
        ),
        ConfigKey(
            RETENTION_BYTES,
            "int",
            "bytes per partition",
            "-1",
            "The oldest sealed segments are deleted while a partition is larger than this; -1 means no limit.",
            alterable=True,
            minimum=0,
            maximum=_INT64_MAX,
            special=(-1,),
        ),
        ConfigKey(
            SEGMENT_BYTES,
            "int",
            "bytes",
            str(1 * GiB),
            "A segment rolls before an entry would take it past this size. Fixed at creation: segment "
            "boundaries must be the same on every replica.",
            alterable=False,
            minimum=1 * KiB,
            maximum=_INT32_MAX,
        ),
        ConfigKey(
            SEGMENT_MS,
            "int",
            "milliseconds",
            str(7 * DAY_MS),
            "A segment rolls at the first entry this much newer than the segment's first entry. Fixed at "
            "creation: segment boundaries must be the same on every replica.",
            alterable=False,
            minimum=1,
            maximum=_INT64_MAX,
        ),
        ConfigKey(
            MAX_MESSAGE_BYTES,
            "int",
            "bytes",
            str(8 * MiB),
            "The largest record batch a produce request may carry. At most 16 MiB - 37 bytes: a batch is one "
            "log entry, and storage holds entries of at most 16 MiB including a 37-byte header.",
            alterable=True,
            minimum=1 * KiB,
            maximum=MAX_LOG_ENTRY_PAYLOAD_BYTES,
            maximum_why="a record batch must fit one log entry: storage's max_entry_bytes of 16 MiB less its "
            "37-byte entry header",
        ),
        ConfigKey(
            MESSAGE_TIMESTAMP_TYPE,
            "enum",
            "",
            TimestampType.CREATE_TIME.value,
            "CreateTime keeps the producer's record timestamps; LogAppendTime replaces them with the leader's "
            "clock when the batch is appended.",
            alterable=True,
            choices=tuple(t.value for t in TimestampType),
        ),
        ConfigKey(
            CLEANUP_POLICY,
            "enum",
            "",
            CleanupPolicy.DELETE.value,
            "delete: segments are deleted by retention.ms and retention.bytes. Log compaction is not supported.",
            alterable=True,
            choices=tuple(p.value for p in CleanupPolicy),
            refused={
                "compact": "log compaction is not implemented; use 'delete'",
                "compact,delete": "log compaction is not implemented; use 'delete'",
                "delete,compact": "log compaction is not implemented; use 'delete'",
            },
        ),
    )
}

_PINNED_AT_CREATION = tuple(key.name for key in _KEYS.values() if not key.alterable)


def config_key(name: str) -> ConfigKey:
    """The schema of key ``name``, or :class:`InvalidConfigError` if there is no such key."""
    spec = _KEYS.get(name) if isinstance(name, str) else None
    if spec is None:
        raise InvalidConfigError(str(name), f"unknown topic config; known keys are {', '.join(sorted(_KEYS))}")
    return spec


def validate_topic_configs(configs: Mapping[str, str], *, creating: bool) -> dict[str, str]:
    """Check ``configs`` and return them normalized, in key order.

    ``creating=True`` also fills in the keys fixed at creation (segment.bytes, segment.ms) with their
    defaults; ``creating=False`` (an alteration) refuses those keys. Raises :class:`InvalidConfigError`
    naming the first wrong key.
    """
    normalized: dict[str, str] = {}
    for name in sorted(configs, key=str):
        spec = config_key(name)
        if not creating and not spec.alterable:
            raise InvalidConfigError(name, "cannot be altered after the topic is created")
        normalized[name] = spec.normalize(configs[name])
    if creating:
        for name in _PINNED_AT_CREATION:
            normalized.setdefault(name, _KEYS[name].default)
    return dict(sorted(normalized.items()))


def _setting(key: str, unit: str, doc: str) -> Any:
    return field(default=int(_KEYS[key].default), metadata=_meta(key, unit, doc))


def _meta(key: str, unit: str, doc: str) -> dict[str, str]:
    return {"key": key, "unit": unit, "doc": doc}


@dataclass(frozen=True)
class TopicConfig:
    """The typed, effective configuration of a topic: stored values, defaults for the rest."""

    retention_ms: int = _setting(RETENTION_MS, "milliseconds", "Age limit of sealed segments; -1 = forever.")
    retention_bytes: int = _setting(RETENTION_BYTES, "bytes", "Size limit per partition; -1 = unlimited.")
    segment_bytes: int = _setting(SEGMENT_BYTES, "bytes", "Segment size limit. Fixed at creation.")
    segment_ms: int = _setting(SEGMENT_MS, "milliseconds", "Segment age limit. Fixed at creation.")
    max_message_bytes: int = _setting(MAX_MESSAGE_BYTES, "bytes", "Largest record batch accepted.")
    message_timestamp_type: TimestampType = field(
        default=TimestampType.CREATE_TIME,
        metadata=_meta(MESSAGE_TIMESTAMP_TYPE, "", "Producer timestamps (CreateTime) or the leader's (LogAppendTime)."),
    )
    cleanup_policy: CleanupPolicy = field(
        default=CleanupPolicy.DELETE, metadata=_meta(CLEANUP_POLICY, "", "Only delete is supported.")
    )

    def validate(self) -> TopicConfig:
        """Return self, or raise :class:`InvalidConfigError` naming the first wrong key."""
        self.to_configs()
        return self

    def to_configs(self) -> dict[str, str]:
        """Every key with its value as a normalized string (checked)."""
        out: dict[str, str] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            text = value.value if isinstance(value, StrEnum) else str(value)
            out[f.metadata["key"]] = _KEYS[f.metadata["key"]].normalize(text)
        return dict(sorted(out.items()))


def effective_topic_config(configs: Mapping[str, str]) -> TopicConfig:
    """The typed config of a topic whose stored configs are ``configs``; missing keys take their defaults.

    Raises :class:`InvalidConfigError` for an unknown key or a bad value.
    """
    by_key = {f.metadata["key"]: f for f in fields(TopicConfig)}
    values: dict[str, Any] = {}
    for name in sorted(configs, key=str):
        value = configs[name]
        if name == MAX_MESSAGE_BYTES and isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
            # A topic stored when the maximum was higher: it still cannot take batches storage would refuse.
            value = str(min(int(value), MAX_LOG_ENTRY_PAYLOAD_BYTES))
        text = config_key(name).normalize(value)
        values[by_key[name].name] = _TYPED.get(name, int)(text)
    return TopicConfig(**values)


_TYPED: dict[str, Any] = {MESSAGE_TIMESTAMP_TYPE: TimestampType, CLEANUP_POLICY: CleanupPolicy}


def describe() -> tuple[ConfigKey, ...]:
    """The schema of every topic config key, sorted by key, for docs and DescribeConfigs."""
    return tuple(_KEYS[name] for name in sorted(_KEYS))


def validate_topic_name(name: str, *, internal: bool = False) -> str:
    """Return ``name`` if it is a valid topic name, else raise :class:`InvalidTopicNameError`.

    ``internal=True`` is for topics the system creates; their names must start with ``__``, and only theirs.
    """
    if not isinstance(name, str):
        raise InvalidTopicNameError(repr(name), "must be a string")
    if not name:
        raise InvalidTopicNameError(name, "must not be empty")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicNameError(name, f"longer than {MAX_TOPIC_NAME_LENGTH} characters ({len(name)})")
    if name in {".", ".."}:
        raise InvalidTopicNameError(name, "'.' and '..' are not allowed")
    if not _TOPIC_NAME.fullmatch(name):
        raise InvalidTopicNameError(name, "only ASCII letters, digits, '.', '_' and '-' are allowed")
    if name.startswith(INTERNAL_TOPIC_PREFIX) and not internal:
        raise InvalidTopicNameError(name, f"names starting with {INTERNAL_TOPIC_PREFIX!r} are reserved for the system")
    if internal and not name.startswith(INTERNAL_TOPIC_PREFIX):
        raise InvalidTopicNameError(name, f"internal topic names must start with {INTERNAL_TOPIC_PREFIX!r}")
    return name


# ------------------------------------------------------------------ config sources (issue 25, DescribeConfigs)


class ConfigSource(StrEnum):
    """Where a topic config's value comes from, with Kafka's DescribeConfigs names."""

    DYNAMIC_TOPIC_CONFIG = "DYNAMIC_TOPIC_CONFIG"  # set on the topic
    DYNAMIC_CLUSTER_CONFIG = "DYNAMIC_CLUSTER_CONFIG"  # a cluster-wide setting (multiraft.controller.cluster_config)
    DEFAULT_CONFIG = "DEFAULT_CONFIG"  # this code's default


@dataclass(frozen=True)
class ConfigEntry:
    """One config of a topic as DescribeConfigs reports it: its effective value and where that comes from."""

    name: str
    value: str
    source: ConfigSource
    read_only: bool  # fixed at creation (segment.bytes, segment.ms)


def topic_config_entries(
    configs: Mapping[str, str], cluster_defaults: Mapping[str, str] | None = None
) -> tuple[ConfigEntry, ...]:
    """Every config key, sorted, for a topic whose stored configs are ``configs``, with its effective value and
    source: the topic's own (``DYNAMIC_TOPIC_CONFIG``), else the cluster's default for that topic key
    (``cluster_defaults``, keyed by topic key: ``DYNAMIC_CLUSTER_CONFIG``), else this code's default.

    A key pinned at creation (segment.bytes, segment.ms: stored on every topic so that replicas agree) whose
    value is the default was not asked for, or asked for at the default, and is reported as ``DEFAULT_CONFIG``.
    """
    cluster = cluster_defaults or {}
    entries = []
    for spec in describe():
        stored = configs.get(spec.name)
        read_only = not spec.alterable
        if stored is not None and not (read_only and stored == spec.default):
            entries.append(ConfigEntry(spec.name, stored, ConfigSource.DYNAMIC_TOPIC_CONFIG, read_only))
        elif stored is None and spec.name in cluster:
            entries.append(ConfigEntry(spec.name, cluster[spec.name], ConfigSource.DYNAMIC_CLUSTER_CONFIG, read_only))
        else:
            value = spec.default if stored is None else stored
            entries.append(ConfigEntry(spec.name, value, ConfigSource.DEFAULT_CONFIG, read_only))
    return tuple(entries)


# ------------------------------------------------------------------------------ end of config sources (issue 25)
