"""multiraft: a Raft-replicated, partitioned message log.

The node runtime lives in this package; the Raft algorithm in :mod:`multiraft.raft`.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
