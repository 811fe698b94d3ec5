"""The ACL authorizer (Kafka's model), pure: does a principal may do an operation on a resource?

Rules, as in Kafka's ``AclAuthorizer``: with authorization off everything is allowed; super users are allowed
everything; otherwise an operation is allowed when an ALLOW binding matches and no DENY binding does (deny
wins). A binding matches a principal when it names it or ``User:*``; a resource when its type is the same and
its pattern is the literal name, the literal ``*``, or a prefix of the name. ALL matches every operation;
an allowed READ, WRITE, DELETE or ALTER implies DESCRIBE.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from multiraft.controller import (
    CLUSTER_RESOURCE,
    WILDCARD,
    AclBinding,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)
from multiraft.errors import AuthorizationFailedError

__all__ = ["Authorizer", "Resource", "ANONYMOUS", "WILDCARD_PRINCIPAL", "user_principal", "CLUSTER"]

ANONYMOUS = "User:ANONYMOUS"
WILDCARD_PRINCIPAL = "User:*"
_IMPLIES_DESCRIBE = frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER})


def user_principal(name: str) -> str:
    return f"User:{name}"


@dataclass(frozen=True, slots=True)
class Resource:
    type: ResourceType
    name: str

    def __str__(self) -> str:
        return f"{self.type} {self.name!r}"


CLUSTER = Resource(ResourceType.CLUSTER, CLUSTER_RESOURCE)


def _matches_resource(binding: AclBinding, resource: Resource) -> bool:
    if binding.resource_type is not resource.type:
        return False
    if binding.pattern_type is PatternType.PREFIXED:
        return resource.name.startswith(binding.resource_name)
    return binding.resource_name in (resource.name, WILDCARD)


class Authorizer:
    """Decisions over one list of bindings (build a new one when the ACLs change)."""

    def __init__(self, acls: Iterable[AclBinding], super_users: Iterable[str] = (), *, enabled: bool = True) -> None:
        self.enabled = enabled
        self._super_users = frozenset(super_users)
        self._by_principal: dict[str, list[AclBinding]] = {}
        for binding in acls:
            self._by_principal.setdefault(binding.principal, []).append(binding)

    def allowed(self, principal: str, operation: AclOperation, resource: Resource) -> bool:
        if not self.enabled or principal in self._super_users:
            return True
        matching = [
            b
            for who in (principal, WILDCARD_PRINCIPAL)
            for b in self._by_principal.get(who, ())
            if _matches_resource(b, resource)
        ]
        if any(b.permission is AclPermission.DENY and b.operation in (operation, AclOperation.ALL) for b in matching):
            return False
        return any(
            b.permission is AclPermission.ALLOW
            and (
                b.operation in (operation, AclOperation.ALL)
                or (operation is AclOperation.DESCRIBE and b.operation in _IMPLIES_DESCRIBE)
            )
            for b in matching
        )

    def allowed_somewhere(self, principal: str, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Whether some ALLOW binding lets the principal do ``operation`` on some resource of the type (Kafka's
        test for InitProducerId: write on any topic). A DENY on a particular resource does not count here."""
        if not self.enabled or principal in self._super_users:
            return True
        return any(
            b.permission is AclPermission.ALLOW
            and b.resource_type is resource_type
            and b.operation in (operation, AclOperation.ALL)
            for who in (principal, WILDCARD_PRINCIPAL)
            for b in self._by_principal.get(who, ())
        )

    def check(self, principal: str, operation: AclOperation, resource: Resource) -> None:
        """Raise :class:`AuthorizationFailedError` naming the principal, operation and resource unless allowed."""
        if not self.allowed(principal, operation, resource):
            raise AuthorizationFailedError(
                f"{principal} may not {operation} {resource}",
                principal=principal,
                operation=str(operation),
                resource_type=str(resource.type),
                resource_name=resource.name,
            )
