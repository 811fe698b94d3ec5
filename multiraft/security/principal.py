"""The principal of the client request being served: set by a front door, read by the node."""

from __future__ import annotations

from contextvars import ContextVar

__all__ = ["CURRENT_PRINCIPAL"]

CURRENT_PRINCIPAL: ContextVar[str] = ContextVar("multiraft_principal", default="")
"""The principal of the client request this task serves ("" outside one: the node's own work). A front door sets
it; the node carries it to the controller leader with the changes the request asks for, and binds producer ids
to it."""
