"""The options of ``multiraft bench`` commands, shared by its modes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from multiraft.tools.cli._produce import Compression

__all__ = [
    "CLUSTER_PANEL",
    "WORKLOAD_PANEL",
    "CLIENT_PANEL",
    "LocalOption",
    "SecureOption",
    "TopicOption",
    "PartitionsOption",
    "ReplicationOption",
    "SizeOption",
    "CountOption",
    "DurationOption",
    "ProducersOption",
    "LingerOption",
    "BatchBytesOption",
    "InFlightOption",
    "CompressionOption",
    "JsonOption",
    "TraceOption",
]

CLUSTER_PANEL = "Cluster"
WORKLOAD_PANEL = "Workload"
CLIENT_PANEL = "Client"

SecureOption = Annotated[
    bool,
    typer.Option(
        "--secure",
        help="With --local: a cluster with TLS on every port, encrypted gossip, SCRAM authentication and ACLs "
        "(scripts/cluster up --secure); the clients connect over TLS as its admin.",
        rich_help_panel=CLUSTER_PANEL,
    ),
]
LocalOption = Annotated[
    int | None,
    typer.Option(
        "--local",
        min=1,
        max=9,
        help="Start a throwaway local cluster of N nodes for this run (stopped at the end).",
        rich_help_panel=CLUSTER_PANEL,
    ),
]
TopicOption = Annotated[
    str | None,
    typer.Option(
        "--topic",
        help="Topic to use; created if missing (default: a fresh one, deleted after).",
        rich_help_panel=WORKLOAD_PANEL,
    ),
]
PartitionsOption = Annotated[
    int,
    typer.Option(
        "--partitions", min=1, help="Partitions of a topic the bench creates.", rich_help_panel=WORKLOAD_PANEL
    ),
]
ReplicationOption = Annotated[
    int,
    typer.Option(
        "--replication-factor", min=1, help="Replicas of a topic the bench creates.", rich_help_panel=WORKLOAD_PANEL
    ),
]
SizeOption = Annotated[
    int,
    typer.Option(
        "--message-size", min=8, max=8 << 20, help="Bytes of each record's value.", rich_help_panel=WORKLOAD_PANEL
    ),
]
CountOption = Annotated[
    int | None,
    typer.Option(
        "--count",
        min=1,
        help="Records to send (default: produce, consume 100,000; latency 5,000; e2e 10,000).",
        rich_help_panel=WORKLOAD_PANEL,
    ),
]
DurationOption = Annotated[
    float | None,
    typer.Option(
        "--duration", min=0.1, help="Seconds to send for, instead of --count.", rich_help_panel=WORKLOAD_PANEL
    ),
]
ProducersOption = Annotated[
    int, typer.Option("--producers", min=1, max=64, help="Producer processes.", rich_help_panel=CLIENT_PANEL)
]
LingerOption = Annotated[
    float,
    typer.Option("--linger-ms", min=0, help="How long a batch waits for more records.", rich_help_panel=CLIENT_PANEL),
]
BatchBytesOption = Annotated[
    int,
    typer.Option("--batch-bytes", min=1024, help="Largest wire batch a producer sends.", rich_help_panel=CLIENT_PANEL),
]
InFlightOption = Annotated[
    int,
    typer.Option(
        "--max-in-flight", min=1, max=5, help="Unacknowledged batches per partition.", rich_help_panel=CLIENT_PANEL
    ),
]
CompressionOption = Annotated[
    Compression, typer.Option("--compression", help="Batch compression.", rich_help_panel=CLIENT_PANEL)
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print exactly one JSON object on stdout (progress stays on stderr).")
]
TraceOption = Annotated[
    Path | None,
    typer.Option(
        "--trace",
        help="Trace each batch's stages into this directory (MULTIRAFT_TRACE for the local nodes and the "
        "clients; nodes of an existing cluster must be started with it) and print where the time goes.",
        rich_help_panel=CLIENT_PANEL,
    ),
]
