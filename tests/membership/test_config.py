"""MembershipConfig: documented fields, profiles, validation that names the field, derived timeouts."""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

import pytest

from membership import MembershipConfig, MembershipConfigError


def test_every_field_documents_its_unit_and_default() -> None:
    for f in fields(MembershipConfig):
        assert f.metadata.get("unit"), f.name
        assert "Default" in f.metadata.get("doc", ""), f.name


def test_describe_lists_every_field_with_its_value() -> None:
    described = MembershipConfig.local().describe()
    assert [name for name, *_ in described] == [f.name for f in fields(MembershipConfig)]
    assert ("probe_interval", "seconds", 0.2) == described[1][:3]


def test_the_lan_profile_is_the_default() -> None:
    assert MembershipConfig.lan() == MembershipConfig()
    assert MembershipConfig().probe_interval == 1.0
    assert MembershipConfig().max_packet_bytes == 1400


def test_the_local_profile_detects_failures_within_a_couple_of_seconds() -> None:
    local, lan = MembershipConfig.local(), MembershipConfig.lan()
    assert local.probe_interval < lan.probe_interval
    assert local.suspicion_timeouts(5)[1] < lan.suspicion_timeouts(5)[0]
    # Typical detection is the confirmed timeout plus a probe or two; the worst case stays a few seconds.
    assert local.suspicion_timeouts(5)[0] + 2 * local.probe_interval <= 1.5
    assert local.failure_detection_bound(5) <= 5.0


def test_profiles_accept_overrides() -> None:
    assert MembershipConfig.local(gossip_nodes=5).gossip_nodes == 5
    assert MembershipConfig.local(gossip_nodes=5).probe_interval == 0.2


@pytest.mark.parametrize(
    ("field_name", "value"),
    [
        ("cluster_name", ""),
        ("probe_interval", 0),
        ("probe_interval", float("nan")),
        ("probe_timeout", 1.5),  # not below probe_interval
        ("indirect_checks", -1),
        ("indirect_checks", 2.5),
        ("suspicion_mult", 0),
        ("awareness_max_multiplier", 0),
        ("retransmit_mult", True),
        ("gossip_nodes", 100),
        ("push_pull_interval", -1.0),
        ("divergence_sync_delay", "soon"),
        ("max_packet_bytes", 512),
        ("max_packet_bytes", 70000),
        ("max_push_pull_bytes", 1024),
        ("tcp_timeout", 0.0),
    ],
)
def test_validation_names_the_wrong_field(field_name: str, value: Any) -> None:
    with pytest.raises(MembershipConfigError) as caught:
        MembershipConfig(**{field_name: value})
    assert caught.value.field == field_name
    assert isinstance(caught.value, ValueError)


def test_suspicion_timeout_grows_with_log_n_and_the_unconfirmed_one_is_a_fixed_multiple() -> None:
    config = MembershipConfig.lan()
    assert config.suspicion_timeouts(1) == config.suspicion_timeouts(10) == (4.0, 24.0)
    shortest_100, longest_100 = config.suspicion_timeouts(100)
    assert shortest_100 == pytest.approx(8.0)
    assert longest_100 == pytest.approx(48.0)
    assert config.suspicion_timeouts(1000)[0] == pytest.approx(12.0)


def test_retransmit_limit_grows_with_log_n() -> None:
    config = MembershipConfig.lan()
    assert [config.retransmit_limit(n) for n in (1, 9, 10, 99, 100, 1000)] == [4, 4, 8, 8, 12, 16]


def test_push_pull_period_stretches_beyond_32_members() -> None:
    config = MembershipConfig.lan()
    assert config.push_pull_period(32) == 30.0
    assert config.push_pull_period(64) == 60.0
    assert config.push_pull_period(1000) == 30.0 * (math.ceil(math.log2(1000) - 5) + 1)


def test_config_is_immutable_and_copies_validate() -> None:
    config = MembershipConfig.local()
    with pytest.raises(AttributeError):
        config.probe_interval = 2.0  # type: ignore[misc]
    with pytest.raises(MembershipConfigError):
        config.with_changes(probe_timeout=5.0)
