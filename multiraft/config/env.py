"""Which ``MULTIRAFT_*`` variables are node settings: every other one of ours is refused by name at start, so
a misspelt setting is never silently ignored; the client's variables and diagnostics switches are let through."""

from __future__ import annotations

__all__ = ["ENV_PREFIX", "IGNORED_VARIABLES", "DEBUG_PREFIX"]

ENV_PREFIX = "MULTIRAFT_"

# Variables of ours that are not node settings (the client library reads them).
IGNORED_VARIABLES = frozenset(
    {
        "MULTIRAFT_BOOTSTRAP",  # client settings
        "MULTIRAFT_CLUSTER_DIR",
        "MULTIRAFT_TLS_CA",
        "MULTIRAFT_TLS_CERT",
        "MULTIRAFT_TLS_KEY",
        "MULTIRAFT_USER",
        "MULTIRAFT_PASSWORD_FILE",
        "MULTIRAFT_BOOTSTRAP_USER",  # read by multiraft.node.services.security: the cluster's first user
        "MULTIRAFT_TRACE",  # multiraft.trace: stage timestamps into this directory (nodes and clients)
    }
)
DEBUG_PREFIX = "MULTIRAFT_DEBUG_"  # diagnostics switches, not settings
