"""JSON encodings of the security commands and state (``_codec`` frames them like every other command).

Bytes travel as lower-case hex. Tags: ``upsert_user`` (``name``, ``salt``, ``iterations``, ``stored_key``,
``server_key``, ``create_only``), ``delete_user`` (``name``), ``create_acls`` (``bindings``), ``delete_acls``
(``filters``: objects whose fields may be null) and ``set_token_key`` (``key``). An ACL binding is
``[principal, resource_type, resource_name, pattern_type, operation, permission]``. In a snapshot the
security state is ``{"users": {name: credential}, "acls": [...], "token_key": hex, "producer_owners":
[[first, count, principal]]}``, present only when not empty.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any, NoReturn, TypeVar

from .errors import CommandDecodeError
from .security import (
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermission,
    CreateAcls,
    DeleteAcls,
    DeleteUser,
    PatternType,
    ResourceType,
    ScramCredential,
    SecurityCommand,
    SecurityState,
    SetTokenKey,
    UpsertUser,
)

__all__ = ["SECURITY_TAGS", "encode_security_command", "decode_security_command", "security_obj", "decode_security"]

SECURITY_TAGS: dict[type, str] = {
    UpsertUser: "upsert_user",
    DeleteUser: "delete_user",
    CreateAcls: "create_acls",
    DeleteAcls: "delete_acls",
    SetTokenKey: "set_token_key",
}
_FILTER_FIELDS = ("principal", "resource_type", "resource_name", "pattern_type", "operation", "permission")
_ENUMS: dict[str, type[StrEnum]] = {
    "resource_type": ResourceType,
    "pattern_type": PatternType,
    "operation": AclOperation,
    "permission": AclPermission,
}
E = TypeVar("E", bound=StrEnum)


def _fail(path: str, message: str) -> NoReturn:
    raise CommandDecodeError(f"{path} {message}")


def _credential_obj(credential: ScramCredential) -> dict[str, Any]:
    return {
        "salt": credential.salt.hex(),
        "iterations": credential.iterations,
        "stored_key": credential.stored_key.hex(),
        "server_key": credential.server_key.hex(),
    }


def _binding_obj(binding: AclBinding) -> list[str]:
    return [
        binding.principal,
        str(binding.resource_type),
        binding.resource_name,
        str(binding.pattern_type),
        str(binding.operation),
        str(binding.permission),
    ]


def _filter_obj(found: AclFilter) -> dict[str, Any]:
    return {name: None if getattr(found, name) is None else str(getattr(found, name)) for name in _FILTER_FIELDS}


def encode_security_command(command: SecurityCommand) -> dict[str, Any]:
    if isinstance(command, UpsertUser):
        return {"name": command.name, "create_only": command.create_only, **_credential_obj(command.credential)}
    if isinstance(command, DeleteUser):
        return {"name": command.name}
    if isinstance(command, CreateAcls):
        return {"bindings": [_binding_obj(b) for b in command.bindings]}
    if isinstance(command, DeleteAcls):
        return {"filters": [_filter_obj(f) for f in command.filters]}
    return {"key": command.key.hex()}


# -------------------------------------------------------------------------------------------------- decoding


def _keys(obj: Any, path: str, keys: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(obj, dict) or set(obj) != set(keys):
        _fail(path, f"is not an object with exactly the keys {list(keys)}")
    return obj


def _str(value: Any, path: str) -> str:
    if not isinstance(value, str):
        _fail(path, "is not a string")
    return value


def _int(value: Any, path: str) -> int:
    if type(value) is not int or not -(2**63) <= value < 2**63:
        _fail(path, "is not a 64-bit integer")
    return value


def _hex(value: Any, path: str) -> bytes:
    try:
        return bytes.fromhex(_str(value, path))
    except ValueError:
        _fail(path, "is not hex")


def _enum(kind: type[E], value: Any, path: str) -> E:
    try:
        return kind(_str(value, path))
    except ValueError:
        _fail(path, f"is not one of {[str(v) for v in kind]}")


def _list(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        _fail(path, "is not a list")
    return value


def _credential(obj: dict[str, Any], path: str) -> ScramCredential:
    return ScramCredential(
        _hex(obj["salt"], f"{path}.salt"),
        _int(obj["iterations"], f"{path}.iterations"),
        _hex(obj["stored_key"], f"{path}.stored_key"),
        _hex(obj["server_key"], f"{path}.server_key"),
    )


def _binding(value: Any, path: str) -> AclBinding:
    items = _list(value, path)
    if len(items) != 6:
        _fail(path, "is not [principal, resource_type, resource_name, pattern_type, operation, permission]")
    return AclBinding(
        _str(items[0], f"{path}[0]"),
        _enum(ResourceType, items[1], f"{path}[1]"),
        _str(items[2], f"{path}[2]"),
        _enum(PatternType, items[3], f"{path}[3]"),
        _enum(AclOperation, items[4], f"{path}[4]"),
        _enum(AclPermission, items[5], f"{path}[5]"),
    )


def _filter(value: Any, path: str) -> AclFilter:
    obj = _keys(value, path, _FILTER_FIELDS)
    fields: dict[str, Any] = {}
    for name in _FILTER_FIELDS:
        item = obj[name]
        if item is None:
            fields[name] = None
        elif name in _ENUMS:
            fields[name] = _enum(_ENUMS[name], item, f"{path}.{name}")
        else:
            fields[name] = _str(item, f"{path}.{name}")
    return AclFilter(**fields)


def _flag(value: Any, path: str) -> bool:
    if type(value) is not bool:
        _fail(path, "is not a boolean")
    return value


_DECODERS: dict[str, Callable[[dict[str, Any], str], SecurityCommand]] = {
    "upsert_user": lambda o, p: UpsertUser(
        _str(_keys(o, p, ("name", "create_only", "salt", "iterations", "stored_key", "server_key"))["name"], p),
        _credential(o, p),
        _flag(o["create_only"], f"{p}.create_only"),
    ),
    "delete_user": lambda o, p: DeleteUser(_str(_keys(o, p, ("name",))["name"], f"{p}.name")),
    "create_acls": lambda o, p: CreateAcls(
        tuple(_binding(b, f"{p}.bindings[]") for b in _list(_keys(o, p, ("bindings",))["bindings"], p))
    ),
    "delete_acls": lambda o, p: DeleteAcls(
        tuple(_filter(f, f"{p}.filters[]") for f in _list(_keys(o, p, ("filters",))["filters"], p))
    ),
    "set_token_key": lambda o, p: SetTokenKey(_hex(_keys(o, p, ("key",))["key"], f"{p}.key")),
}


def decode_security_command(tag: str, fields: dict[str, Any]) -> SecurityCommand | None:
    """The command of tag ``tag`` (None: not a security tag)."""
    decoder = _DECODERS.get(tag)
    return None if decoder is None else decoder(fields, tag)


# -------------------------------------------------------------------------------------------------- state


def security_obj(state: SecurityState) -> dict[str, Any]:
    return {
        "users": {name: _credential_obj(state.users[name]) for name in sorted(state.users)},
        "acls": [_binding_obj(b) for b in state.acls],
        "token_key": state.token_key.hex(),
        "producer_owners": [list(owner) for owner in state.producer_owners],
    }


def decode_security(value: Any) -> SecurityState:
    path = "snapshot.security"
    obj = _keys(value, path, ("users", "acls", "token_key", "producer_owners"))
    users_obj = obj["users"]
    if not isinstance(users_obj, dict):
        _fail(f"{path}.users", "is not an object")
    users = {
        _str(name, f"{path}.users"): _credential(
            _keys(cred, f"{path}.users[]", ("salt", "iterations", "stored_key", "server_key")), f"{path}.users[]"
        )
        for name, cred in users_obj.items()
    }
    acls = tuple(_binding(b, f"{path}.acls[]") for b in _list(obj["acls"], f"{path}.acls"))
    owners = []
    for item in _list(obj["producer_owners"], f"{path}.producer_owners"):
        entry = _list(item, f"{path}.producer_owners[]")
        if len(entry) != 3:
            _fail(f"{path}.producer_owners[]", "is not [first, count, principal]")
        owners.append((_int(entry[0], f"{path}.producer_owners[0]"), _int(entry[1], "count"), _str(entry[2], "p")))
    return SecurityState(users, tuple(sorted(set(acls))), _hex(obj["token_key"], f"{path}.token_key"), tuple(owners))
