"""What the source and the sink share: option names checked against the known ones, the connection options,
and the driver's first contact with the cluster.

Spark hands options over as strings, with case-insensitive names. Kafka's source ignores names it does not
know; here a typo (``startingOffset``, ``maxOffsetPerTrigger``) is refused with the nearest known name, since
an ignored option silently changes what a query reads or writes.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from multiraft import Admin, ConfigError
from spark_connector._security import SECURITY_OPTIONS, Security, parse_security

__all__ = [
    "CONNECTION_OPTIONS",
    "Connection",
    "check_names",
    "connect",
    "lower_keys",
    "missing_topics_error",
    "parse_connection",
    "positive_int",
]

DEFAULT_CONNECT_TIMEOUT_MS = 5_000
DEFAULT_REQUEST_TIMEOUT_MS = 30_000

CONNECTION_OPTIONS = ("bootstrap", "connectTimeoutMs", "requestTimeoutMs", *SECURITY_OPTIONS)
"""The options both the source and the sink take."""


def lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _suggestion(name: str, known: Iterable[str]) -> str:
    by_lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return f"did you mean {by_lower[close[0]]}? " if close else ""


def check_names(
    options: Mapping[str, str],
    known: Collection[str],
    *,
    passed_by_spark: Collection[str],
    unsupported: Mapping[str, str],
    role: str,
    aliases: Collection[str] = (),
) -> None:
    """Refuse options that ``role`` (the multiraft source or sink) does not take, naming the first of them.

    ``known`` holds the names as users write them; ``passed_by_spark`` the lower-case names Spark itself adds
    (``path`` from ``load(path)``, ``checkpointLocation``, ``queryName``); ``unsupported`` Kafka names we
    refuse with a reason; ``aliases`` other accepted spellings, not listed in the error.
    """
    lowered = {str(k).lower() for k in options}
    for key, why in unsupported.items():
        if key in lowered:
            raise ConfigError(key, f"is not supported by the multiraft {role}: {why}")
    unknown = sorted(lowered - {k.lower() for k in (*known, *aliases)} - set(passed_by_spark))
    if unknown:
        key = next(str(k) for k in options if str(k).lower() == unknown[0])
        raise ConfigError(key, f"unknown option: {_suggestion(key, known)}(the {role} takes: {', '.join(known)})")


def positive_int(options: Mapping[str, str], key: str, name: str) -> int | None:
    """``options[key]`` (lower-case key) as an integer above 0; None when absent; else an error naming ``name``."""
    text = options.get(key)
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        raise ConfigError(name, f"must be a positive integer, got {text!r}") from None
    if value <= 0:
        raise ConfigError(name, f"must be a positive integer, got {text!r}")
    return value


@dataclass(frozen=True)
class Connection:
    """Where the cluster is, how long the driver and the tasks wait for it, and how they prove who they are."""

    bootstrap: str
    connect_timeout_s: float
    request_timeout_s: float
    security: Security = field(default_factory=Security)


def parse_connection(options: Mapping[str, str]) -> Connection:
    """``bootstrap``, ``connectTimeoutMs``, ``requestTimeoutMs`` and the security options (``_security``) from
    lower-cased options."""
    bootstrap = options.get("bootstrap", "").strip()
    if not bootstrap:
        raise ConfigError("bootstrap", "is required: host:port of one or more nodes, comma-separated")
    for address in bootstrap.split(","):
        host, _, port = address.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError("bootstrap", f"must be host:port, comma-separated, not {bootstrap!r}")
    connect_ms = positive_int(options, "connecttimeoutms", "connectTimeoutMs") or DEFAULT_CONNECT_TIMEOUT_MS
    request_ms = positive_int(options, "requesttimeoutms", "requestTimeoutMs") or DEFAULT_REQUEST_TIMEOUT_MS
    return Connection(bootstrap, connect_ms / 1000, request_ms / 1000, parse_security(options))


def connect(connection: Connection) -> Admin:
    """The driver's Admin client: while no node has answered it, a call gives up after connectTimeoutMs with
    "no node reachable at <bootstrap> (<cause>)"; after that each call may take requestTimeoutMs."""
    return Admin(
        connection.bootstrap,
        request_timeout_s=connection.request_timeout_s,
        connect_timeout_s=connection.connect_timeout_s,
        **connection.security.client_kwargs(),
    )


def missing_topics_error(option: str, missing: Collection[str], existing: Iterable[str]) -> ConfigError:
    """``subscribe: topic 'ordres' does not exist (did you mean orders?)``: a typo must not read nothing."""
    visible = sorted(name for name in existing if not name.startswith("__"))
    names = ", ".join(repr(name) for name in sorted(missing))
    what = f"topic {names} does not exist" if len(missing) == 1 else f"topics {names} do not exist"
    hints = [_suggestion(name, visible) for name in sorted(missing)]
    hint = " ".join(h.strip() for h in hints if h)
    listed = ", ".join(visible[:20]) + (", ..." if len(visible) > 20 else "") if visible else "none"
    return ConfigError(option, f"{what}{f' ({hint})' if hint else ''}; existing topics: {listed}")
