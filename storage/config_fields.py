"""How a configuration dataclass declares a field: its default, unit and meaning in one place.

A leaf module (it imports nothing of ours), so that every floor's config (storage, membership, the node's)
declares its fields the same way and ``docs/configuration.md`` can be generated from the metadata.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

__all__ = ["setting"]


def setting(default: Any, unit: str, doc: str) -> Any:
    """A configuration field with its default, unit and meaning (read back by ``describe_fields``)."""
    return field(default=default, metadata={"unit": unit, "doc": doc})
