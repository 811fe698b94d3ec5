"""The Raft core's loggers are structlog's own (``structlog.get_logger``).

The core adds no processors: whoever renders the events (``multiraft.logging.configure_logging``) adds the
timestamp, so the core never reads a clock.
"""

from __future__ import annotations

from structlog import get_logger

__all__ = ["get_logger"]
