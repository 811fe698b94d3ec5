"""The placement keys of a node's configuration: where it stands (rack, host) and how much it holds.

:class:`PlacementConfig` is a base of :class:`multiraft.config.node.NodeConfig`; the values travel in the SWIM member
metadata and the controller's registration, and the controller's placement reads them there.
"""

from __future__ import annotations

from dataclasses import dataclass

from multiraft.errors import ConfigError
from storage.config_fields import setting

__all__ = ["PlacementConfig"]

# What the member-list carries (membership.MAX_TEXT_BYTES, MAX_HOST_BYTES).
_MAX_RACK_BYTES, _MAX_HOST_BYTES = 255, 64


@dataclass(frozen=True)
class PlacementConfig:
    """Failure domains and capacity of a node."""

    rack: str = setting("", "name", "Failure domain; replicas of a partition go to different racks when possible.")
    host: str = setting(
        "",
        "name",
        "The machine this node runs on, the same for every node of one machine (several nodes per machine use "
        "more than one core). Two replicas of a partition are never placed on one host. Empty: unknown, the "
        "node is a host of its own. At most 64 bytes.",
    )
    capacity: float = setting(1.0, "weight", "Relative capacity used when placing replicas; > 0.")

    def validate_placement(self) -> None:
        """Raise :class:`ConfigError` naming the first wrong placement key."""
        if self.capacity <= 0:
            raise ConfigError("capacity", f"must be > 0, got {self.capacity}")
        for key, limit in (("rack", _MAX_RACK_BYTES), ("host", _MAX_HOST_BYTES)):
            value = getattr(self, key)
            if len(value.encode()) > limit or not value.isprintable():
                raise ConfigError(key, f"must be printable and at most {limit} bytes of UTF-8, got {value[:80]!r}")
