"""``multiraft user create|delete|list`` and ``multiraft acl add|remove|list`` (flags as kafka-acls')."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from multiraft.tools.cli._common import console
from multiraft.tools.cli._options import (
    BootstrapOption,
    ClusterDirOption,
    TimeoutOption,
    client_tls,
    credentials,
    fail,
    open_admin,
    read_password,
    with_tls_options,
)
from multiraft.tools.cli._topic import print_table

if TYPE_CHECKING:
    from multiraft import AclBinding

__all__ = ["user_app", "acl_app"]

user_app = typer.Typer(help="SCRAM-SHA-256 users (the cluster keeps salted verifiers, never passwords).")
acl_app = typer.Typer(help="ACLs: who may do what on which topics, groups and the cluster (deny wins).")

_OPERATIONS = ("read", "write", "create", "delete", "alter", "describe", "cluster-action", "all")
_CLUSTER_RESOURCE = "multiraft-cluster"

PasswordFileOption = Annotated[
    str | None,
    typer.Option("--password-file", help="File whose first line is the new user's password (default: a prompt)."),
]


def _warn_if_unauthenticated(cluster_dir: Path | None, what: str) -> None:
    """This command had neither credentials nor a client certificate, and the cluster still obeyed: it
    authenticates no one, so ``what`` is stored but nothing enforces it (Kafka and Redpanda keep users and
    ACLs the same way, and enforce them only once authentication and authorization are on)."""
    tls = client_tls(cluster_dir)
    if credentials(cluster_dir) or (tls is not None and tls.cert_file):
        return
    print(
        f"warning: this cluster accepted the command without credentials, so it authenticates no client: "
        f"{what} take effect only once the nodes run with `authentication` and `authorization` "
        "(docs/security.md)",
        file=sys.stderr,
    )


@user_app.command("create")
@with_tls_options
def user_create(
    name: str,
    password_file: PasswordFileOption = None,
    iterations: int = typer.Option(8192, "--iterations", min=4096, help="PBKDF2 iterations of the verifier."),
    update: bool = typer.Option(False, "--update", help="Replace the password of an existing user."),
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Create a user (or with --update change its password); the password never leaves this machine."""
    password = read_password(password_file, f"password of {name}: ", confirm=True)
    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        admin.create_user(name, password, iterations=iterations, update=update)
    console.print(f"{'updated' if update else 'created'} user {name!r}", highlight=False)
    _warn_if_unauthenticated(cluster_dir, "users")


@user_app.command("delete")
@with_tls_options
def user_delete(
    name: str, bootstrap: BootstrapOption = None, cluster_dir: ClusterDirOption = None, timeout: TimeoutOption = 30.0
) -> None:
    """Delete a user; its tokens stop working at once."""
    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        admin.delete_user(name)
    console.print(f"deleted user {name!r}", highlight=False)


@user_app.command("list")
@with_tls_options
def user_list(
    as_json: bool = typer.Option(False, "--json", help="Print a JSON array instead of a table."),
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Every user with its mechanism and iterations."""
    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        users = admin.list_users()
    if as_json:
        print(json.dumps([{"name": u.name, "mechanism": u.mechanism, "iterations": u.iterations} for u in users]))
        return
    table = Table("user", "mechanism", "iterations")
    for u in users:
        table.add_row(u.name, u.mechanism, str(u.iterations))
    print_table(table)


def _resources(topic: list[str], group: list[str], cluster: bool) -> list[tuple[str, str]]:
    found = [("topic", t) for t in topic] + [("group", g) for g in group]
    return found + ([("cluster", _CLUSTER_RESOURCE)] if cluster else [])


def _check_operations(operation: list[str]) -> list[str]:
    for op in operation:
        if op not in _OPERATIONS:
            raise typer.BadParameter(f"{op!r} is not one of {', '.join(_OPERATIONS)}", param_hint="--operation")
    return operation


AllowOption = Annotated[list[str], typer.Option("--allow-principal", help="User:name or User:* (repeatable).")]
DenyOption = Annotated[list[str], typer.Option("--deny-principal", help="User:name or User:* (repeatable).")]
OperationOption = Annotated[
    list[str], typer.Option("--operation", help=f"One of {', '.join(_OPERATIONS)} (repeatable).")
]
TopicOption = Annotated[list[str], typer.Option("--topic", help="A topic name, '*' or a prefix (repeatable).")]
GroupOption = Annotated[list[str], typer.Option("--group", help="A consumer group, '*' or a prefix (repeatable).")]
ClusterOption = Annotated[bool, typer.Option("--cluster", help="The cluster resource.")]
PatternOption = Annotated[
    str, typer.Option("--resource-pattern-type", help="literal (a name, '*': every one) or prefixed.")
]


def _bindings(
    allow: list[str],
    deny: list[str],
    operation: list[str],
    topic: list[str],
    group: list[str],
    cluster: bool,
    pattern: str,
) -> list[AclBinding]:
    from multiraft import AclBinding

    if not allow and not deny:
        fail("name a principal: --allow-principal or --deny-principal")
    if not operation:
        fail("name an operation: --operation")
    resources = _resources(topic, group, cluster)
    if not resources:
        fail("name a resource: --topic, --group or --cluster")
    if pattern not in ("literal", "prefixed"):
        raise typer.BadParameter("must be literal or prefixed", param_hint="--resource-pattern-type")
    return [
        AclBinding(principal, kind, name, op, permission, pattern if kind != "cluster" else "literal")
        for permission, principals in (("allow", allow), ("deny", deny))
        for principal in principals
        for kind, name in resources
        for op in _check_operations(operation)
    ]


@acl_app.command("add")
@with_tls_options
def acl_add(
    allow_principal: AllowOption = [],  # noqa: B006 - typer reads the default, never mutates it
    deny_principal: DenyOption = [],  # noqa: B006
    operation: OperationOption = [],  # noqa: B006
    topic: TopicOption = [],  # noqa: B006
    group: GroupOption = [],  # noqa: B006
    cluster: ClusterOption = False,
    resource_pattern_type: PatternOption = "literal",
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Add ACLs: every principal x resource x operation given."""
    bindings = _bindings(allow_principal, deny_principal, operation, topic, group, cluster, resource_pattern_type)
    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        admin.create_acls(bindings)
    for binding in bindings:
        console.print(f"added: {binding}", highlight=False)
    _warn_if_unauthenticated(cluster_dir, "ACLs")


@acl_app.command("remove")
@with_tls_options
def acl_remove(
    allow_principal: AllowOption = [],  # noqa: B006
    deny_principal: DenyOption = [],  # noqa: B006
    operation: OperationOption = [],  # noqa: B006
    topic: TopicOption = [],  # noqa: B006
    group: GroupOption = [],  # noqa: B006
    cluster: ClusterOption = False,
    resource_pattern_type: PatternOption = "literal",
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Remove the ACLs that ``acl add`` with the same flags added."""
    from multiraft import AclFilter

    bindings = _bindings(allow_principal, deny_principal, operation, topic, group, cluster, resource_pattern_type)
    filters = [
        AclFilter(b.principal, b.resource_type, b.resource_name, b.operation, b.permission, b.pattern_type)
        for b in bindings
    ]
    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        removed = admin.delete_acls(filters)
    for binding in removed:
        console.print(f"removed: {binding}", highlight=False)
    if not removed:
        console.print("no ACL matched", highlight=False)


@acl_app.command("list")
@with_tls_options
def acl_list(
    principal: str | None = typer.Option(None, "--principal", help="Only this principal's ACLs."),
    topic: str | None = typer.Option(None, "--topic", help="Only ACLs naming this topic pattern."),
    group: str | None = typer.Option(None, "--group", help="Only ACLs naming this group pattern."),
    cluster: ClusterOption = False,
    as_json: bool = typer.Option(False, "--json", help="Print a JSON array instead of a table."),
    bootstrap: BootstrapOption = None,
    cluster_dir: ClusterDirOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """The ACLs, optionally only those of a principal or resource."""
    from multiraft import AclFilter

    kind, name = ("topic", topic) if topic else ("group", group) if group else (None, None)
    if cluster:
        kind, name = "cluster", _CLUSTER_RESOURCE
    with open_admin(bootstrap, cluster_dir, timeout) as admin:
        bindings = admin.describe_acls(AclFilter(principal=principal, resource_type=kind, resource_name=name))
    if as_json:
        print(
            json.dumps(
                [
                    {
                        "principal": b.principal,
                        "permission": b.permission,
                        "operation": b.operation,
                        "resource_type": b.resource_type,
                        "resource_name": b.resource_name,
                        "pattern_type": b.pattern_type,
                    }
                    for b in bindings
                ]
            )
        )
        return
    table = Table("principal", "permission", "operation", "resource", "name", "pattern")
    for b in bindings:
        table.add_row(b.principal, b.permission, b.operation, b.resource_type, b.resource_name, b.pattern_type)
    print_table(table)
