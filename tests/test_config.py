"""A node's configuration: TOML, then MULTIRAFT_* variables, then flags; a wrong key or value is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from multiraft.config.node import NodeConfig, config_reference, load_config
from multiraft.errors import ConfigError
from storage import ENTRY_OVERHEAD_BYTES, StorageConfig

ROOT = Path(__file__).resolve().parent.parent
REQUIRED = {"node_id": 1, "data_dir": "/var/lib/multiraft"}


def test_toml_then_variables_then_flags_override_each_other(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text('node_id = 3\ndata_dir = "/d"\ntick_ms = 40\nrack = "r1"\nseeds = ["127.0.0.1:1"]\n')
    config = load_config(
        path, environ={"MULTIRAFT_TICK_MS": "30", "MULTIRAFT_RACK": "r2"}, overrides={"rack": "r3", "capacity": None}
    )
    assert (config.node_id, config.tick_ms, config.rack, config.seeds) == (3, 30, "r3", ("127.0.0.1:1",))
    assert config.capacity == 1.0


def test_lists_come_comma_separated_from_variables_and_flags() -> None:
    config = load_config(
        environ={"MULTIRAFT_INITIAL_CLUSTER": "1=127.0.0.1:7100, 2=127.0.0.1:7101"},
        overrides={**REQUIRED, "peer_address": "127.0.0.1:7100"},
    )
    assert config.initial_members() == {1: "127.0.0.1:7100", 2: "127.0.0.1:7101"}


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ('node_id = 1\ndata_dir = "d"\ncolour = "blue"\n', "colour"),
        ('node_id = "one"\ndata_dir = "d"\n', "node_id"),
        ('node_id = 1\ndata_dir = "d"\ntick_ms = 0\n', "tick_ms"),
        ('node_id = 1\ndata_dir = "d"\nclient_address = "localhost"\n', "client_address"),
        ('node_id = 1\ndata_dir = "d"\ncontroller_replicas = 2\n', "controller_replicas"),
        ('node_id = 1\ndata_dir = "d"\nheartbeat_ticks = 20\n', "heartbeat_ticks"),
        ('node_id = 1\ndata_dir = "d"\nelection_ticks = 5\n', "election_ticks"),  # < 3 coalesced heartbeats
        ('node_id = 1\ndata_dir = "d"\nmax_frame_bytes = 20971520\n', "max_frame_bytes"),  # no room for an append
        ('node_id = 1\ndata_dir = "d"\ninitial_cluster = ["1=127.0.0.1:1", "1=127.0.0.1:2"]\n', "initial_cluster"),
        ('node_id = 1\ndata_dir = "d"\nlog_format = "xml"\n', "log_format"),
        ('data_dir = "d"\n', "node_id"),
        ("node_id = 1\n", "data_dir"),
        ("node_id = = 1\n", "config"),
        ('node_id = 1\ndata_dir = "d"\nmove_stall_s = 0\n', "move_stall_s"),
        ('node_id = 1\ndata_dir = "d"\nclient_address = "10.1.2.3:7000"\n', "client_address"),  # no TLS, no auth
        ('node_id = 1\ndata_dir = "d"\ngossip_address = "0.0.0.0:7200"\n', "gossip_address"),
        ('node_id = 1\ndata_dir = "d"\ntls_cert_file = "c.pem"\n', "tls_key_file"),
        ('node_id = 1\ndata_dir = "d"\ntls_cert_file = "c.pem"\ntls_key_file = "k.pem"\n', "tls_ca_file"),
        ('node_id = 1\ndata_dir = "d"\ntls_client_auth = "always"\n', "tls_client_auth"),
        ('node_id = 1\ndata_dir = "d"\nauthentication = ["kerberos"]\n', "authentication"),
        ('node_id = 1\ndata_dir = "d"\nsuper_users = ["admin"]\n', "super_users"),
        (f'node_id = 1\ndata_dir = "d"\nhost = "{"m" * 65}"\n', "host"),  # more than the member-list carries
        ('node_id = 1\ndata_dir = "d"\nhost = "a\\tb"\n', "host"),
        (f'node_id = 1\ndata_dir = "d"\nrack = "{"r" * 256}"\n', "rack"),
    ],
)
def test_a_wrong_key_or_value_is_named(tmp_path: Path, toml: str, key: str) -> None:
    path = tmp_path / "node.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as raised:
        load_config(path, environ={})
    assert raised.value.field == key
    assert str(raised.value).startswith(f"{key}:")


def test_an_unknown_variable_is_named_and_diagnostic_switches_are_ignored() -> None:
    with pytest.raises(ConfigError, match="MULTIRAFT_TICKS"):
        load_config(environ={"MULTIRAFT_TICKS": "5"}, overrides=REQUIRED)
    assert load_config(environ={"MULTIRAFT_DEBUG_GC_MS": "1"}, overrides=REQUIRED).tick_ms == NodeConfig.tick_ms


def test_the_client_s_tls_variables_do_not_stop_a_node_from_starting() -> None:
    client = {"MULTIRAFT_TLS_CA": "ca.pem", "MULTIRAFT_TLS_CERT": "me.pem", "MULTIRAFT_TLS_KEY": "me-key.pem"}
    assert load_config(environ=client, overrides=REQUIRED).tls_cert_file == ""


def test_a_batch_or_offsets_commit_limit_the_log_store_cannot_hold_is_refused() -> None:
    largest = StorageConfig().max_entry_bytes - ENTRY_OVERHEAD_BYTES
    assert load_config(environ={}, overrides=REQUIRED).max_batch_bytes == largest
    with pytest.raises(ConfigError, match="max_entry_bytes") as raised:
        load_config(environ={}, overrides={**REQUIRED, "max_batch_bytes": 16 * 1024**2})
    assert raised.value.field == "max_batch_bytes"
    with pytest.raises(ConfigError, match="max_entry_bytes") as raised:
        load_config(environ={}, overrides={**REQUIRED, "max_offsets_commit_bytes": 16 * 1024**2})
    assert raised.value.field == "max_offsets_commit_bytes"


def test_a_node_must_be_listed_at_its_own_peer_address() -> None:
    with pytest.raises(ConfigError, match="initial_cluster"):
        load_config(environ={}, overrides={**REQUIRED, "initial_cluster": "1=127.0.0.1:9"})


def test_docs_configuration_md_lists_every_key_as_the_code_defines_it() -> None:
    document = (ROOT / "docs" / "configuration.md").read_text()
    assert config_reference() in document, "run `multiraft node config-reference` into docs/configuration.md"


def test_a_node_off_the_loopback_starts_with_tls_and_authentication_or_when_told_it_is_insecure() -> None:
    exposed = {**REQUIRED, "client_address": "10.1.2.3:7000"}
    secured = {"tls_cert_file": "c", "tls_key_file": "k", "tls_ca_file": "ca", "authentication": "scram-sha-256"}
    assert load_config(environ={}, overrides={**exposed, **secured}).authentication == ("scram-sha-256",)
    assert load_config(environ={}, overrides={**exposed, "insecure": True}).insecure
    assert load_config(environ={}, overrides={**REQUIRED, "client_address": "[::1]:7000"}).tls_cert_file == ""
