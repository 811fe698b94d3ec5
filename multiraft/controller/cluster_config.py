"""Dynamic cluster-wide configuration (Kafka's dynamic cluster-default broker configs, rpk's ``cluster config``).

A small set of settings that change at run time without restarts. They live in the controller's replicated
state (``ClusterState.cluster_configs``, set by the ``AlterClusterConfigs`` command), so every node sees the
same values at the same point of the controller's log and acts on them as it applies the state.

Every setting is a cluster-wide default of a topic config, under Kafka's broker-level name:

=============================  ==========================  ================================================
cluster key                    topic key it defaults       takes effect
=============================  ==========================  ================================================
``log.retention.ms``           ``retention.ms``            at once, on every topic that does not set it
``log.retention.bytes``        ``retention.bytes``         at once, on every topic that does not set it
``message.max.bytes``          ``max.message.bytes``       at once, on every topic that does not set it
``log.segment.bytes``          ``segment.bytes``           on topics created afterwards (pinned at creation)
``log.roll.ms``                ``segment.ms``              on topics created afterwards (pinned at creation)
=============================  ==========================  ================================================

Not ``log.message.timestamp.type``: the client reads a topic's timestamp type from the topic's own configs
(it reports LogAppendTime itself), so a cluster default would not reach it. ``message.max.bytes`` is enforced
by the leaders; a producer that assumed a higher limit learns the lower one from the first refusal.

A topic's effective value comes from, in order: its own config (``DYNAMIC_TOPIC_CONFIG``), the cluster
setting (``DYNAMIC_CLUSTER_CONFIG``), the built-in default (``DEFAULT_CONFIG``): see
:func:`multiraft.controller.topic_config.topic_config_entries` with :func:`topic_defaults`. Values are
checked and normalized as the topic key's are; errors name the cluster key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from .errors import InvalidConfigError
from .topic_config import (
    MAX_MESSAGE_BYTES,
    RETENTION_BYTES,
    RETENTION_MS,
    SEGMENT_BYTES,
    SEGMENT_MS,
    ConfigKey,
    ConfigSource,
    TopicConfig,
    config_key,
    effective_topic_config,
)

__all__ = [
    "SOURCE_DEFAULT",
    "SOURCE_CLUSTER",
    "SOURCE_TOPIC",
    "ClusterConfigEntry",
    "cluster_config_key",
    "cluster_config_keys",
    "validate_cluster_configs",
    "describe_cluster_configs",
    "topic_defaults",
    "effective_config",
]

SOURCE_DEFAULT = ConfigSource.DEFAULT_CONFIG.value
SOURCE_CLUSTER = ConfigSource.DYNAMIC_CLUSTER_CONFIG.value
SOURCE_TOPIC = ConfigSource.DYNAMIC_TOPIC_CONFIG.value

# cluster key -> the topic key it is the cluster-wide default of
_TOPIC_KEY_OF: dict[str, str] = {
    "log.retention.ms": RETENTION_MS,
    "log.retention.bytes": RETENTION_BYTES,
    "message.max.bytes": MAX_MESSAGE_BYTES,
    "log.segment.bytes": SEGMENT_BYTES,
    "log.roll.ms": SEGMENT_MS,
}
_NEW_TOPICS_ONLY = " Applies to topics created afterwards: a topic pins it at creation."


def _cluster_spec(cluster_key: str, topic_key: str) -> ConfigKey:
    spec = config_key(topic_key)
    later = "" if spec.alterable else _NEW_TOPICS_ONLY
    doc = f"Cluster-wide default of the topic config {topic_key}: {spec.doc}{later}"
    return replace(spec, name=cluster_key, doc=doc, alterable=True)


_KEYS: dict[str, ConfigKey] = {name: _cluster_spec(name, key) for name, key in sorted(_TOPIC_KEY_OF.items())}


@dataclass(frozen=True)
class ClusterConfigEntry:
    """One cluster setting as DescribeClusterConfigs reports it."""

    name: str
    value: str  # effective
    source: str  # SOURCE_DEFAULT or SOURCE_CLUSTER
    default: str
    doc: str


def cluster_config_key(name: str) -> ConfigKey:
    """The schema of cluster setting ``name``, or :class:`InvalidConfigError` naming it."""
    spec = _KEYS.get(name) if isinstance(name, str) else None
    if spec is None:
        raise InvalidConfigError(str(name), f"unknown cluster config; known keys are {', '.join(_KEYS)}")
    return spec


def cluster_config_keys() -> tuple[ConfigKey, ...]:
    """Every cluster setting's schema, sorted by key."""
    return tuple(_KEYS.values())


def validate_cluster_configs(configs: Mapping[str, str]) -> dict[str, str]:
    """``configs`` normalized, in key order; :class:`InvalidConfigError` naming the first wrong key."""
    return {name: cluster_config_key(name).normalize(configs[name]) for name in sorted(configs, key=str)}


def describe_cluster_configs(stored: Mapping[str, str], names: Iterable[str] = ()) -> list[ClusterConfigEntry]:
    """Each setting in ``names`` (every one when empty) with its effective value and source."""
    wanted = list(names) or list(_KEYS)
    entries = []
    for name in wanted:
        spec = cluster_config_key(name)
        value = stored.get(name)
        source = SOURCE_CLUSTER if value is not None else SOURCE_DEFAULT
        entries.append(ClusterConfigEntry(name, value if value is not None else spec.default, source, spec.default,
                                          spec.doc))  # fmt: skip
    return entries


def topic_defaults(cluster_configs: Mapping[str, str]) -> dict[str, str]:
    """The topic configs the cluster settings default, under the topic keys."""
    return {_TOPIC_KEY_OF[k]: v for k, v in cluster_configs.items() if k in _TOPIC_KEY_OF}


def effective_config(configs: Mapping[str, str], cluster_configs: Mapping[str, str]) -> TopicConfig:
    """The typed config of a topic storing ``configs``: its own values, then the cluster's, then defaults."""
    return effective_topic_config({**topic_defaults(cluster_configs), **configs})
