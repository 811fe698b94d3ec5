"""The group-membership arguments of a Consumer, validated (a wrong one raises ConfigError naming it)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from multiraft.consumer_groups import ASSIGNORS, COOPERATIVE_ASSIGNORS
from multiraft.errors import ConfigError

__all__ = ["MemberSettings", "strategies"]


def strategies(value: str | Sequence[str]) -> tuple[str, ...]:
    """``partition_assignment_strategy`` as a tuple of assignor names, most preferred first."""
    names = (value,) if isinstance(value, str) else tuple(value)
    if not names:
        raise ConfigError("partition_assignment_strategy", "needs at least one assignor")
    for name in names:
        if name not in ASSIGNORS:
            raise ConfigError("partition_assignment_strategy", f"unknown assignor {name!r}; known: {sorted(ASSIGNORS)}")
    if len(set(names)) != len(names):
        raise ConfigError("partition_assignment_strategy", f"names an assignor twice: {list(names)}")
    return names


@dataclass(frozen=True)
class MemberSettings:
    """How a consumer takes part in its group (Kafka's consumer settings of the same names)."""

    group_id: str = field(metadata={"unit": "name", "doc": "The group to join."})
    group_instance_id: str | None = field(
        default=None,
        metadata={
            "unit": "name",
            "doc": "Static membership: a member that comes back under this id within session_timeout_s gets its "
            "partitions back with no rebalance, and close() does not leave the group. None: a dynamic member.",
        },
    )
    session_timeout_s: float = field(
        default=45.0,
        metadata={"unit": "seconds", "doc": "The coordinator drops a member whose heartbeats stop this long."},
    )
    heartbeat_interval_s: float = field(
        default=3.0, metadata={"unit": "seconds", "doc": "Time between heartbeats (below session_timeout_s)."}
    )
    max_poll_interval_s: float = field(
        default=300.0,
        metadata={
            "unit": "seconds",
            "doc": "Longest time between poll() calls; past it the member leaves the group (the next poll "
            "rejoins). Also the rebalance timeout: how long the group waits for the member to rejoin.",
        },
    )
    partition_assignment_strategy: tuple[str, ...] = field(
        default=("cooperative-sticky",),
        metadata={
            "unit": "assignor names",
            "doc": "Assignors, most preferred first: range, roundrobin, sticky, cooperative-sticky. The member "
            "rebalances cooperatively (gives up only the partitions that move) when all of them are cooperative.",
        },
    )
    client_id: str = field(
        default="multiraft-consumer", metadata={"unit": "name", "doc": "Names the member in group descriptions."}
    )
    client_rack: str | None = field(
        default=None,
        metadata={"unit": "name", "doc": "The consumer's rack: rack-aware assignors give it partitions there."},
    )

    def validate(self) -> None:
        if not isinstance(self.group_id, str) or not self.group_id:
            raise ConfigError("group_id", "must be a non-empty string")
        for name in ("group_instance_id", "client_rack"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ConfigError(name, f"must be a non-empty string or None, got {value!r}")
        if not isinstance(self.client_id, str) or not re.fullmatch(r"[\x20-\x7e]*", self.client_id):
            raise ConfigError("client_id", f"must be a printable string, got {self.client_id!r}")
        for name in ("session_timeout_s", "heartbeat_interval_s", "max_poll_interval_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 2**31 / 1000:
                raise ConfigError(name, f"must be a number of seconds > 0 (below 2^31 ms), got {value!r}")
        if self.heartbeat_interval_s >= self.session_timeout_s:
            raise ConfigError(
                "heartbeat_interval_s",
                f"must be below session_timeout_s ({self.session_timeout_s}), got {self.heartbeat_interval_s}",
            )
        strategies(self.partition_assignment_strategy)

    @property
    def session_timeout_ms(self) -> int:
        return round(self.session_timeout_s * 1000)

    @property
    def rebalance_timeout_ms(self) -> int:
        return round(self.max_poll_interval_s * 1000)

    @property
    def cooperative(self) -> bool:
        """Kafka's rule: a member rebalances cooperatively only if every assignor it supports does."""
        return all(name in COOPERATIVE_ASSIGNORS for name in self.partition_assignment_strategy)
