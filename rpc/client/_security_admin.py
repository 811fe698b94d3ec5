"""Users and ACLs: the part of :class:`rpc.client.Admin` behind ``multiraft user`` and ``multiraft acl``.

A user's SCRAM-SHA-256 credential is computed here, from the password, so that only the salted verifier
(salt, iterations, StoredKey, ServerKey) goes to the cluster. ACLs follow Kafka's model (``docs/security.md``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from multiraft.security.scram import scram_credential
from rpc.client._cluster import ClusterClient
from rpc.proto import multiraft_pb2 as pb
from rpc.proto import multiraft_pb2_grpc as pb_grpc

__all__ = ["SecurityAdmin", "AclBinding", "AclFilter", "UserInfo", "CLUSTER_RESOURCE"]

CLUSTER_RESOURCE = "multiraft-cluster"


@dataclass(frozen=True, slots=True)
class UserInfo:
    name: str
    mechanism: str
    iterations: int


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    """``permission`` (allow, deny) for ``principal`` (User:name, User:*) to do ``operation`` (read, write,
    create, delete, alter, describe, cluster-action, all) on ``resource_type`` (topic, group, cluster) resources
    named ``resource_name`` (``pattern_type`` literal, where ``*`` is every one, or prefixed)."""

    principal: str
    resource_type: str
    resource_name: str
    operation: str
    permission: str = "allow"
    pattern_type: str = "literal"

    def __str__(self) -> str:
        return (
            f"{self.permission} {self.principal} {self.operation} {self.resource_type}:"
            f"{self.pattern_type}:{self.resource_name}"
        )


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Matches the bindings whose every given field (not None) is equal."""

    principal: str | None = None
    resource_type: str | None = None
    resource_name: str | None = None
    operation: str | None = None
    permission: str | None = None
    pattern_type: str | None = None


def _binding_pb(b: AclBinding) -> pb.AclBinding:
    return pb.AclBinding(
        principal=b.principal,
        resource_type=b.resource_type,
        resource_name=b.resource_name,
        pattern_type=b.pattern_type,
        operation=b.operation,
        permission=b.permission,
    )


def _binding(b: pb.AclBinding) -> AclBinding:
    return AclBinding(b.principal, b.resource_type, b.resource_name, b.operation, b.permission, b.pattern_type)


def _filter_pb(f: AclFilter) -> pb.AclFilter:
    return pb.AclFilter(
        principal=f.principal or "",
        resource_type=f.resource_type or "",
        resource_name=f.resource_name or "",
        pattern_type=f.pattern_type or "",
        operation=f.operation or "",
        permission=f.permission or "",
    )


class SecurityAdmin:
    """Mixed into :class:`rpc.client.Admin`."""

    _client: ClusterClient

    def _security(self, call: str, request: object) -> object:
        return self._client.call_any_node(
            lambda channel, timeout: getattr(pb_grpc.SecurityStub(channel), call)(request, timeout=timeout)
        )

    def create_user(self, name: str, password: str, *, iterations: int = 8192, update: bool = False) -> None:
        """Create a SCRAM-SHA-256 user (``update``: or replace its password); UserExistsError if it exists."""
        c = scram_credential(password, iterations=iterations)
        credential = pb.ScramCredential(
            salt=c.salt, iterations=c.iterations, stored_key=c.stored_key, server_key=c.server_key
        )
        self._security("UpsertUser", pb.UpsertUserRequest(name=name, credential=credential, create_only=not update))

    def delete_user(self, name: str) -> None:
        """UnknownUserError if there is no such user. Its tokens stop working at once."""
        self._security("DeleteUser", pb.DeleteUserRequest(name=name))

    def list_users(self) -> list[UserInfo]:
        response = self._security("ListUsers", pb.ListUsersRequest())
        assert isinstance(response, pb.ListUsersResponse)
        return [UserInfo(u.name, u.mechanism, u.iterations) for u in response.users]

    def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        self._security("CreateAcls", pb.CreateAclsRequest(bindings=[_binding_pb(b) for b in bindings]))

    def delete_acls(self, filters: Iterable[AclFilter]) -> list[AclBinding]:
        """Remove the bindings any filter matches; returns them."""
        response = self._security("DeleteAcls", pb.DeleteAclsRequest(filters=[_filter_pb(f) for f in filters]))
        assert isinstance(response, pb.DeleteAclsResponse)
        return [_binding(b) for b in response.deleted]

    def describe_acls(self, found: AclFilter | None = None) -> list[AclBinding]:
        response = self._security("DescribeAcls", pb.DescribeAclsRequest(filter=_filter_pb(found or AclFilter())))
        assert isinstance(response, pb.DescribeAclsResponse)
        return [_binding(b) for b in response.bindings]
