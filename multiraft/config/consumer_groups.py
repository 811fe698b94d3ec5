"""The consumer-group keys of a node's configuration (Kafka's ``group.*`` broker settings).

:class:`ConsumerGroupConfig` is a base of :class:`multiraft.config.node.NodeConfig`;
:meth:`ConsumerGroupConfig.group_settings`
hands the values to the coordinators (:class:`multiraft.consumer_groups.GroupSettings`) the node hosts.
"""

from __future__ import annotations

from dataclasses import dataclass

from multiraft.consumer_groups import GroupSettings
from multiraft.errors import ConfigError
from storage.config_fields import setting

__all__ = ["ConsumerGroupConfig"]

_MAX_TIMEOUT_MS = 2**31 - 1  # the wire carries session timeouts as int32


@dataclass(frozen=True)
class ConsumerGroupConfig:
    """Consumer-group coordinator keys."""

    group_min_session_timeout_ms: int = setting(
        6_000, "milliseconds", "Shortest session timeout a consumer-group member may ask for; a shorter is refused."
    )
    group_max_session_timeout_ms: int = setting(
        1_800_000, "milliseconds", "Longest session timeout a consumer-group member may ask for."
    )
    group_initial_rebalance_delay_ms: int = setting(
        3_000,
        "milliseconds",
        "An empty group that gets its first member waits this long for others (each newcomer restarts the wait, "
        "up to the rebalance timeout) before it forms its first generation (Kafka's "
        "group.initial.rebalance.delay.ms).",
    )
    group_max_size: int = setting(1_000, "members", "Members one consumer group may hold; a join beyond is refused.")

    def validate_groups(self) -> None:
        """Raise :class:`ConfigError` naming the first wrong group key."""
        ranges = {
            "group_min_session_timeout_ms": (1, _MAX_TIMEOUT_MS),
            "group_max_session_timeout_ms": (1, _MAX_TIMEOUT_MS),
            "group_initial_rebalance_delay_ms": (0, _MAX_TIMEOUT_MS),
            "group_max_size": (1, 1_000_000),
        }
        for key, (low, high) in ranges.items():
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise ConfigError(key, f"must be an integer in [{low}, {high}], got {value!r}")
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ConfigError(
                "group_min_session_timeout_ms",
                f"must not exceed group_max_session_timeout_ms ({self.group_max_session_timeout_ms})",
            )

    def group_settings(self) -> GroupSettings:
        return GroupSettings(
            min_session_timeout_ms=self.group_min_session_timeout_ms,
            max_session_timeout_ms=self.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=self.group_initial_rebalance_delay_ms,
            max_group_size=self.group_max_size,
        )
