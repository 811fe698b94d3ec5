"""Structured logging, configured once per process.

Library code (``storage``, ``membership``, the Raft core, the node, the client) logs through structlog and
adds no processors of its own (the packages below ``multiraft`` wrap a stdlib logger, so that even used alone
they never print on stdout); this module owns the processors and the rendering. Entry points (the CLI, a
node process, a benchmark) call :func:`configure_logging` once: humans get ``key=value`` lines on stderr,
machines one JSON object per line with ``json=True`` (or ``MULTIRAFT_LOG_FORMAT=json``). The timestamp is
added here, when an event is rendered, so the sans-IO Raft core never reads a clock. Records from the
standard ``logging`` module (grpc, py4j) go through the same renderer.

Until an entry point configures logging, importing this module hands structlog's events to stdlib
``logging`` (warnings and errors on stderr, nothing below), instead of structlog's development default,
which prints every event to stdout: a process that uses the client library, a Spark executor for instance,
keeps stdout clean. A process that configured structlog itself is left alone.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TextIO

import structlog

__all__ = ["configure_logging", "get_logger"]

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    """``structlog.get_logger(name)``, typed."""
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(name)
    return logger


def configure_logging(level: str | None = None, *, json: bool | None = None, stream: TextIO | None = None) -> None:
    """Send structlog and stdlib logging to ``stream`` (stderr by default).

    ``level`` defaults to ``MULTIRAFT_LOG_LEVEL`` or ``info``; ``json`` defaults to
    ``MULTIRAFT_LOG_FORMAT == "json"``.
    """
    level_name = (level or os.environ.get("MULTIRAFT_LOG_LEVEL") or "info").lower()
    if level_name not in _LEVELS:
        raise ValueError(f"log level must be one of {sorted(_LEVELS)}, not {level_name!r}")
    if json is None:
        json = os.environ.get("MULTIRAFT_LOG_FORMAT", "").lower() == "json"
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if json
        else structlog.processors.LogfmtRenderer(key_order=["timestamp", "level", "logger", "event"])
    )
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(_LEVELS[level_name])
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


def _hand_events_to_stdlib_until_configured() -> None:
    if structlog.is_configured():
        return
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.processors.LogfmtRenderer(key_order=["level", "logger", "event"]),  # stdlib adds tracebacks
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,  # configure_logging() must still reach loggers already used
    )


_hand_events_to_stdlib_until_configured()
