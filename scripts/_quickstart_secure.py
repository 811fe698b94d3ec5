"""``scripts/quickstart --secure``: the same pipeline with TLS on every port, SCRAM users and ACLs.

The cluster is started as ``scripts/cluster up --secure`` starts one (a fresh CA, node certificates, mutual TLS
between nodes) with authentication and authorization on; its first user, ``admin``, comes from
``MULTIRAFT_BOOTSTRAP_USER`` and is the one super user. The admin then makes two principals and their ACLs:

* ``clickstream``, the producer: may write ``events``, nothing else;
* ``spark``, the Spark queries: may read ``events`` and write ``events_per_minute`` (the per-minute counts).

Every client of the pipeline connects over TLS (checking the cluster's CA) as its own principal, and the run
shows the ACLs at work: the producer's principal may not read ``events``, Spark's may not write it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from multiraft import (
    AclBinding,
    Admin,
    AuthenticationFailedError,
    AuthorizationFailedError,
    Consumer,
    MultiraftError,
    Producer,
    TlsSettings,
)

__all__ = ["SECURE_SETTINGS", "Principals", "bootstrap_admin", "grant", "refusals"]

ADMIN, PRODUCER, SPARK = "admin", "clickstream", "spark"
SECURE_SETTINGS: dict[str, Any] = {
    "authentication": ["scram-sha-256"],
    "authorization": True,
    "super_users": [f"User:{ADMIN}"],
}
_ADMIN_READY_S = 60.0


@dataclass(frozen=True)
class Principals:
    """The run's passwords (fresh each run) and the cluster's CA: how each principal connects."""

    ca_file: str
    passwords: dict[str, str] = field(
        default_factory=lambda: {name: secrets.token_urlsafe(18) for name in (ADMIN, PRODUCER, SPARK)}, repr=False
    )

    def client(self, user: str) -> dict[str, Any]:
        """Keyword arguments of Producer, Consumer and Admin for ``user``."""
        return {"tls": TlsSettings(ca_file=self.ca_file), "user": user, "password": self.passwords[user]}

    def spark_options(self, user: str) -> dict[str, str]:
        """The connector's options for ``user`` (librdkafka's names)."""
        return {
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": self.ca_file,
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": user,
            "sasl.password": self.passwords[user],
        }


@contextlib.contextmanager
def bootstrap_admin(principals: Principals) -> Iterator[None]:
    """While the nodes start: their first user is ``admin`` (they inherit this process's environment)."""
    saved = os.environ.get("MULTIRAFT_BOOTSTRAP_USER")
    os.environ["MULTIRAFT_BOOTSTRAP_USER"] = f"{ADMIN}:{principals.passwords[ADMIN]}"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("MULTIRAFT_BOOTSTRAP_USER", None)
        else:
            os.environ["MULTIRAFT_BOOTSTRAP_USER"] = saved


def grant(bootstrap: str, principals: Principals) -> list[str]:
    """As admin (once the controller leader has made it): the two principals and their ACLs; what was done."""
    deadline = time.monotonic() + _ADMIN_READY_S
    for _ in range(1_000):  # bounded: the bootstrap user appears within seconds of the first leader
        with Admin(bootstrap, request_timeout_s=10, **principals.client(ADMIN)) as admin:
            try:
                admin.list_users()
            except (AuthenticationFailedError, MultiraftError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
                continue
            for name in (PRODUCER, SPARK):
                admin.create_user(name, principals.passwords[name])
            admin.create_acls(
                [
                    AclBinding(f"User:{PRODUCER}", "topic", "events", "write"),
                    AclBinding(f"User:{SPARK}", "topic", "events", "read"),
                    AclBinding(f"User:{SPARK}", "topic", "events_per_minute", "write"),
                ]
            )
            return [str(binding) for binding in admin.describe_acls()]
    raise TimeoutError("the admin user never appeared")


def refusals(bootstrap: str, principals: Principals) -> list[str]:
    """The ACLs at work: each principal tries what it may not do; returns what the cluster answered."""
    answers: list[str] = []
    with Consumer(bootstrap, auto_offset_reset="earliest", **principals.client(PRODUCER)) as consumer:
        consumer.assign([("events", 0)], start="earliest")
        try:
            for _ in range(20):  # a refused fetch surfaces on a poll
                consumer.poll(0.5)
            answers.append(f"{PRODUCER} read events: NOT refused")
        except AuthorizationFailedError as exc:
            answers.append(f"{PRODUCER} may not read events: {exc}")
    with Producer(bootstrap, delivery_timeout_s=10, **principals.client(SPARK)) as producer:
        try:
            producer.send("events", b"not an event").result(timeout=30)
            answers.append(f"{SPARK} wrote events: NOT refused")
        except AuthorizationFailedError as exc:
            answers.append(f"{SPARK} may not write events: {exc}")
    return answers
