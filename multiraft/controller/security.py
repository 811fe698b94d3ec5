"""Security metadata in the controller's replicated state: SCRAM users, ACLs, the cluster token key, and the
principal each block of producer ids was handed to.

Users keep only their SCRAM-SHA-256 verifiers (RFC 5802 / 7677: salt, iterations, StoredKey, ServerKey),
never a password. ACLs follow Kafka's model: a principal (``User:name`` or ``User:*``) is allowed or denied an
operation on a resource (topic, group or the cluster) named literally (``*``: every one) or by prefix.
The token key signs the short-lived tokens any node verifies; the bootstrapping controller leader sets it
once (:class:`SetTokenKey` changes nothing when a key is there). Pure: no I/O, clock or randomness.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from .errors import ControllerArgumentError, DuplicateUserError, UserNotFoundError

__all__ = [
    "ResourceType",
    "PatternType",
    "AclOperation",
    "AclPermission",
    "AclBinding",
    "AclFilter",
    "ScramCredential",
    "SecurityState",
    "UpsertUser",
    "DeleteUser",
    "CreateAcls",
    "DeleteAcls",
    "SetTokenKey",
    "SecurityCommand",
    "SECURITY_COMMAND_TYPES",
    "CLUSTER_RESOURCE",
    "WILDCARD",
    "MIN_SCRAM_ITERATIONS",
    "MAX_SCRAM_ITERATIONS",
    "apply_security",
    "check_principal",
    "check_user_name",
    "check_binding",
]

CLUSTER_RESOURCE = "multiraft-cluster"  # the one cluster resource's name (Kafka's "kafka-cluster")
WILDCARD = "*"  # a literal resource name or principal name matching every one
MIN_SCRAM_ITERATIONS = 4096  # RFC 7677's minimum
MAX_SCRAM_ITERATIONS = 1_000_000  # above this one authentication costs seconds of a node's CPU
_KEY_BYTES = 32  # SHA-256 output: StoredKey, ServerKey, the token key
_MIN_SALT, _MAX_SALT = 16, 64
_MAX_NAME = 255
MAX_ACLS = 100_000  # a bound on the state's size, far above any real cluster's list


class ResourceType(StrEnum):
    TOPIC = "topic"
    GROUP = "group"
    CLUSTER = "cluster"


class PatternType(StrEnum):
    LITERAL = "literal"  # the name itself; "*" matches every resource of the type
    PREFIXED = "prefixed"  # every name starting with it


class AclOperation(StrEnum):
    ALL = "all"
    READ = "read"
    WRITE = "write"
    CREATE = "create"
    DELETE = "delete"
    ALTER = "alter"
    DESCRIBE = "describe"
    CLUSTER_ACTION = "cluster-action"


class AclPermission(StrEnum):
    ALLOW = "allow"
    DENY = "deny"


@dataclass(frozen=True, order=True)
class AclBinding:
    """One ACL: ``permission`` for ``principal`` to do ``operation`` on the resources the pattern matches."""

    principal: str
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    operation: AclOperation
    permission: AclPermission

    def __str__(self) -> str:
        return (
            f"{self.permission} {self.principal} {self.operation} on {self.resource_type} "
            f"{self.pattern_type}:{self.resource_name}"
        )


@dataclass(frozen=True)
class AclFilter:
    """Matches the bindings whose every given field is equal (None: any value), for delete and describe."""

    principal: str | None = None
    resource_type: ResourceType | None = None
    resource_name: str | None = None
    pattern_type: PatternType | None = None
    operation: AclOperation | None = None
    permission: AclPermission | None = None

    def matches(self, binding: AclBinding) -> bool:
        return all(
            wanted is None or wanted == getattr(binding, name)
            for name, wanted in (
                ("principal", self.principal),
                ("resource_type", self.resource_type),
                ("resource_name", self.resource_name),
                ("pattern_type", self.pattern_type),
                ("operation", self.operation),
                ("permission", self.permission),
            )
        )


@dataclass(frozen=True)
class ScramCredential:
    """A SCRAM-SHA-256 verifier: what a server needs to check a password it never sees."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def __repr__(self) -> str:  # keys stay out of logs
        return f"ScramCredential(iterations={self.iterations})"


@dataclass(frozen=True)
class SecurityState:
    """The security part of :class:`~multiraft.controller.ClusterState` (its mappings are never mutated)."""

    users: Mapping[str, ScramCredential] = field(default_factory=dict)
    acls: tuple[AclBinding, ...] = ()  # sorted, distinct
    token_key: bytes = b""
    producer_owners: tuple[tuple[int, int, str], ...] = ()  # (first id, count, principal), by first id

    def __repr__(self) -> str:
        return f"SecurityState(users={sorted(self.users)}, acls={len(self.acls)}, token_key={bool(self.token_key)})"

    @property
    def empty(self) -> bool:
        return not (self.users or self.acls or self.token_key or self.producer_owners)

    def producer_owner(self, producer_id: int) -> str | None:
        """The principal a block holding ``producer_id`` was allocated to, or None (unbound)."""
        owners = self.producer_owners
        low, high = 0, len(owners)  # the first block starting after producer_id is owners[low]
        while low < high:
            middle = (low + high) // 2
            if owners[middle][0] <= producer_id:
                low = middle + 1
            else:
                high = middle
        if low:
            first, count, principal = owners[low - 1]
            if first <= producer_id < first + count:
                return principal
        return None

    def bind_producer_ids(self, first: int, count: int, principal: str) -> SecurityState:
        owners = tuple(sorted((*self.producer_owners, (first, count, principal))))
        return replace(self, producer_owners=owners)


# ---------------------------------------------------------------------------------------------- commands


@dataclass(frozen=True)
class UpsertUser:
    """Create a user, or replace its credential; ``create_only`` fails if it exists."""

    name: str
    credential: ScramCredential
    create_only: bool = False


@dataclass(frozen=True)
class DeleteUser:
    name: str


@dataclass(frozen=True)
class CreateAcls:
    """Add bindings (one already there is no change)."""

    bindings: tuple[AclBinding, ...]


@dataclass(frozen=True)
class DeleteAcls:
    """Remove every binding any filter matches."""

    filters: tuple[AclFilter, ...]


@dataclass(frozen=True)
class SetTokenKey:
    """Set the cluster's token key if it has none (only the first one proposed takes effect)."""

    key: bytes

    def __repr__(self) -> str:
        return "SetTokenKey(...)"


SecurityCommand = UpsertUser | DeleteUser | CreateAcls | DeleteAcls | SetTokenKey
SECURITY_COMMAND_TYPES: tuple[type[SecurityCommand], ...] = (
    UpsertUser,
    DeleteUser,
    CreateAcls,
    DeleteAcls,
    SetTokenKey,
)


# ---------------------------------------------------------------------------------------------- checking


def check_user_name(name: str) -> None:
    if not 1 <= len(name) <= _MAX_NAME or not name.isprintable() or any(c.isspace() for c in name):
        raise ControllerArgumentError("name", f"a user name is 1 to {_MAX_NAME} printable characters, no spaces")
    if name == WILDCARD:
        raise ControllerArgumentError("name", "'*' is the wildcard principal, not a user")


def check_principal(principal: str) -> None:
    kind, sep, name = principal.partition(":")
    if not sep or kind != "User":
        raise ControllerArgumentError("principal", f"expected User:name or User:*, got {principal[:64]!r}")
    if name != WILDCARD:
        try:
            check_user_name(name)
        except ControllerArgumentError as exc:
            raise ControllerArgumentError("principal", str(exc)) from exc


def check_binding(binding: AclBinding) -> None:
    check_principal(binding.principal)
    name = binding.resource_name
    if not 1 <= len(name) <= _MAX_NAME or not name.isprintable():
        raise ControllerArgumentError("resource_name", f"must be 1 to {_MAX_NAME} printable characters")
    if binding.resource_type is ResourceType.CLUSTER and name != CLUSTER_RESOURCE:
        raise ControllerArgumentError("resource_name", f"the cluster resource is named {CLUSTER_RESOURCE!r}")
    if binding.pattern_type is PatternType.PREFIXED and name == WILDCARD:
        raise ControllerArgumentError("resource_name", "'*' is a literal wildcard; a prefix cannot be '*'")


def _check_credential(credential: ScramCredential) -> None:
    if not MIN_SCRAM_ITERATIONS <= credential.iterations <= MAX_SCRAM_ITERATIONS:
        raise ControllerArgumentError(
            "iterations", f"must be in [{MIN_SCRAM_ITERATIONS}, {MAX_SCRAM_ITERATIONS}], got {credential.iterations}"
        )
    if not _MIN_SALT <= len(credential.salt) <= _MAX_SALT:
        raise ControllerArgumentError("salt", f"must be {_MIN_SALT} to {_MAX_SALT} bytes, got {len(credential.salt)}")
    for name, key in (("stored_key", credential.stored_key), ("server_key", credential.server_key)):
        if len(key) != _KEY_BYTES:
            raise ControllerArgumentError(name, f"must be {_KEY_BYTES} bytes (SHA-256), got {len(key)}")


# ---------------------------------------------------------------------------------------------- applying


def apply_security(state: SecurityState, command: SecurityCommand) -> SecurityState:
    """The state after ``command`` (the same object when nothing changes); ControllerError if it is invalid."""
    if isinstance(command, UpsertUser):
        check_user_name(command.name)
        _check_credential(command.credential)
        existing = state.users.get(command.name)
        if existing is not None and command.create_only:
            raise DuplicateUserError(command.name)
        if existing == command.credential:
            return state
        return replace(state, users={**state.users, command.name: command.credential})
    if isinstance(command, DeleteUser):
        if command.name not in state.users:
            raise UserNotFoundError(command.name)
        return replace(state, users={n: c for n, c in state.users.items() if n != command.name})
    if isinstance(command, CreateAcls):
        for binding in command.bindings:
            check_binding(binding)
        acls = tuple(sorted(set(state.acls) | set(command.bindings)))
        if len(acls) > MAX_ACLS:
            raise ControllerArgumentError("bindings", f"the cluster holds at most {MAX_ACLS} ACLs")
        return state if acls == state.acls else replace(state, acls=acls)
    if isinstance(command, DeleteAcls):
        kept = tuple(b for b in state.acls if not any(f.matches(b) for f in command.filters))
        return state if kept == state.acls else replace(state, acls=kept)
    if isinstance(command, SetTokenKey):
        if len(command.key) != _KEY_BYTES:
            raise ControllerArgumentError("key", f"must be {_KEY_BYTES} bytes, got {len(command.key)}")
        return state if state.token_key else replace(state, token_key=command.key)
    raise TypeError(f"not a security command: {type(command).__name__}")
