"""Client authentication and authorization, shared by the node and the client library: principals, SCRAM-SHA-256
(:mod:`multiraft.security.scram`), the cluster's bearer tokens (:mod:`._tokens`), the ACL authorizer
(:mod:`._authorizer`),
and the principal of the request being served (:data:`CURRENT_PRINCIPAL`, set by a front door).

The users and ACLs themselves live in the controller's replicated state (:mod:`multiraft.controller.security`).
"""

from __future__ import annotations

from contextvars import ContextVar

from multiraft.security._authorizer import (
    ANONYMOUS,
    CLUSTER,
    WILDCARD_PRINCIPAL,
    Authorizer,
    Resource,
    user_principal,
)
from multiraft.security._tokens import TOKEN_PREFIX, Token, issue_token, verify_token
from multiraft.security.scram import DEFAULT_ITERATIONS, MECHANISM, ScramClient, ScramServer, scram_credential

__all__ = [
    "ANONYMOUS",
    "CLUSTER",
    "WILDCARD_PRINCIPAL",
    "Authorizer",
    "Resource",
    "user_principal",
    "DEFAULT_ITERATIONS",
    "MECHANISM",
    "ScramClient",
    "ScramServer",
    "scram_credential",
    "TOKEN_PREFIX",
    "Token",
    "issue_token",
    "verify_token",
    "CURRENT_PRINCIPAL",
]

CURRENT_PRINCIPAL: ContextVar[str] = ContextVar("multiraft_principal", default="")
"""The principal of the client request this task serves ("" outside one: the node's own work). A front door sets
it; the node carries it to the controller leader with the changes the request asks for, and binds producer ids
to it."""
