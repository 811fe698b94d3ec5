"""Log replication: Raft §5.3 and §5.4.2 (Figure 8), flow control and fast backtracking."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from multiraft.raft import EntryKind, Message, MessageType, NotLeader, ProposalDropped, Role

from .harness import Cluster


def _app_entries(line: str) -> list[int]:
    match = re.search(r"entries=\[([^\]]*)\]", line)
    if not match:
        return []
    return [int(item.split("/")[0]) for item in match.group(1).split()]


def test_5_3_a_proposal_commits_on_a_majority_and_is_applied_on_every_node_in_log_order() -> None:
    cluster = Cluster()
    cluster.elect(1)
    for i in range(5):
        cluster.propose(1, f"m{i}".encode())
    cluster.tick_all(2)
    for node_id in (1, 2, 3):
        assert cluster.applied_payloads(node_id) == [f"m{i}".encode() for i in range(5)]


def test_5_3_propose_returns_the_index_the_entry_is_applied_at() -> None:
    cluster = Cluster()
    cluster.elect(1)
    index = cluster.propose(1, b"x")
    term = cluster.node(1).term
    for node_id in (1, 2, 3):
        entry = cluster.hosts[node_id].applied_entries[-1]
        assert (entry.index, entry.term, bytes(entry.payload)) == (index, term, b"x")


def test_5_3_a_follower_with_conflicting_uncommitted_entries_is_overwritten_by_the_leader() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.isolate(1)
    for i in range(3):
        cluster.node(1).propose(f"lost{i}".encode())  # only on the old leader
    cluster.stabilize()
    cluster.tick_all(40)
    new_leader = cluster.leader()
    assert new_leader in (2, 3)
    cluster.heal()
    cluster.propose(new_leader, b"kept")
    cluster.tick_all(3)
    for node_id in (1, 2, 3):
        assert cluster.applied_payloads(node_id) == [b"kept"]
    log1 = cluster.node(1)._raft.log
    logn = cluster.node(new_leader)._raft.log
    assert [log1.term(i) for i in range(1, log1.last_index() + 1)] == [
        logn.term(i) for i in range(1, logn.last_index() + 1)
    ]


def test_the_leader_counts_its_own_copy_only_once_persisted() -> None:
    cluster = Cluster()
    cluster.elect(1)
    leader = cluster.hosts[1]
    index = leader.node.propose(b"x")
    out = leader.take_ready()  # the append goes out before the leader's own fsync
    to_2 = [m for m in out if m.to == 2]
    cluster.hosts[2].node.step(to_2[0])
    acks = cluster.hosts[2].handle_ready()
    leader.node.step(acks[0])  # one follower acknowledged: 1 of 3 persisted copies
    assert leader.node.status().commit < index
    leader.persist()  # the leader's own fsync makes 2 of 3
    assert leader.node.status().commit == index


def test_5_3_entries_sent_in_replicate_state_are_never_resent_when_all_is_acknowledged() -> None:
    cluster = Cluster(config={"max_entries_per_msg": 2, "max_inflight_msgs": 4})
    cluster.elect(1)
    cluster.transcript.clear()
    for i in range(40):
        cluster.node(1).propose(f"e{i}".encode())
        if i % 7 == 0:
            cluster.stabilize()
    cluster.stabilize()
    sent: Counter[tuple[str, int]] = Counter()
    for line in cluster.transcript:
        if " APP " in line and line.startswith("1->"):
            for index in _app_entries(line):
                sent[(line[:4], index)] += 1
    assert sent and max(sent.values()) == 1
    assert len(sent) == 2 * 40


def test_flow_control_the_window_of_in_flight_appends_is_bounded_by_count() -> None:
    cluster = Cluster(config={"max_entries_per_msg": 1, "max_inflight_msgs": 3})
    cluster.elect(1)
    for i in range(10):
        cluster.node(1).propose(f"e{i}".encode())
    out = cluster.hosts[1].handle_ready()
    apps_to_2 = [m for m in out if m.to == 2 and m.type is MessageType.APP]
    assert len(apps_to_2) == 3
    assert cluster.node(1).status().progress[2].paused


def test_flow_control_the_window_of_in_flight_appends_is_bounded_by_bytes() -> None:
    cluster = Cluster(config={"max_entries_per_msg": 1, "max_inflight_bytes": 100})
    cluster.elect(1)
    for _ in range(10):
        cluster.node(1).propose(b"x" * 60)
    out = cluster.hosts[1].handle_ready()
    apps_to_2 = [m for m in out if m.to == 2 and m.type is MessageType.APP]
    assert len(apps_to_2) == 2  # 60 bytes in flight leaves room for one more; 120 fills the window
    progress = cluster.node(1).status().progress[2]
    assert progress.inflight_bytes == 120


def test_max_size_per_msg_splits_appends_but_always_sends_at_least_one_entry() -> None:
    cluster = Cluster(config={"max_size_per_msg": 100})
    cluster.elect(1)
    for size in (40, 40, 40, 500, 10):
        cluster.node(1).propose(b"x" * size)
    out = cluster.hosts[1].handle_ready()
    sizes = [[len(e.payload) for e in m.entries] for m in out if m.to == 2 and m.type is MessageType.APP]
    assert sizes == [[40, 40], [40], [500], [10]]


def test_a_lost_append_is_recovered_after_the_next_heartbeat() -> None:
    cluster = Cluster(config={"quiesce": False})
    cluster.elect(1)
    dropped: list[Message] = []

    def drop_first_append_to_3(m: Message) -> bool:
        if m.type is MessageType.APP and m.to == 3 and m.entries and not dropped:
            dropped.append(m)
            return False
        return True

    cluster.filters.append(drop_first_append_to_3)
    cluster.propose(1, b"x")
    assert dropped
    assert cluster.applied_payloads(3) == []
    cluster.tick_all(3)
    assert cluster.applied_payloads(3) == [b"x"]


def test_fast_backtracking_needs_one_rejection_per_divergent_term_not_per_entry() -> None:
    cluster = Cluster(config={"pre_vote": False, "check_quorum": False})
    cluster.elect(1)
    cluster.isolate(1)
    for i in range(30):  # 30 entries of term 2 that only node 1 has
        cluster.node(1).propose(f"stale{i}".encode())
    cluster.stabilize()
    cluster.campaign(2)
    for i in range(20):  # 20 entries of term 3 on nodes 2 and 3
        cluster.propose(2, f"new{i}".encode())
    cluster.campaign(3)  # node 3 leads term 4 and starts probing node 1 after its own last entry
    assert cluster.node(3).role is Role.LEADER
    cluster.heal()
    cluster.transcript.clear()
    cluster.tick_all(2)
    rejections = [line for line in cluster.transcript if line.startswith("1->3 APP_RESP") and "reject" in line]
    # Stepping back one entry per round trip would take 21 rejections; the term hint takes one.
    assert len(rejections) == 1
    assert cluster.applied_payloads(1) == [f"new{i}".encode() for i in range(20)]


def test_a_proposal_on_a_follower_raises_not_leader_with_the_leader_hint() -> None:
    cluster = Cluster()
    cluster.elect(1)
    with pytest.raises(NotLeader) as info:
        cluster.node(2).propose(b"x")
    assert info.value.leader_id == 1
    fresh = Cluster()
    with pytest.raises(NotLeader) as info:
        fresh.node(1).propose(b"x")
    assert info.value.leader_id is None


def test_proposals_beyond_max_uncommitted_bytes_are_dropped_until_entries_commit() -> None:
    cluster = Cluster(config={"max_uncommitted_bytes": 100})
    cluster.elect(1)
    cluster.isolate(1)
    cluster.node(1).propose(b"x" * 60)
    cluster.node(1).propose(b"x" * 40)
    with pytest.raises(ProposalDropped):
        cluster.node(1).propose(b"x")
    cluster.heal()
    cluster.tick_all(2)
    cluster.node(1).propose(b"x" * 100)


def test_entries_keep_their_kind_and_the_leaders_timestamp_on_every_replica() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.node(1).propose(b"c", kind=EntryKind.CONTROL, timestamp_ms=1_700_000_000_123)
    cluster.stabilize()
    for node_id in (1, 2, 3):
        entry = cluster.hosts[node_id].applied_entries[-1]
        assert (entry.kind, entry.timestamp_ms) == (EntryKind.CONTROL, 1_700_000_000_123)
    noop = cluster.hosts[2].applied_entries[0]
    assert (noop.kind, noop.timestamp_ms, bytes(noop.payload)) == (EntryKind.NOOP, 0, b"")


def test_payloads_are_never_copied_from_propose_to_apply_on_every_node() -> None:
    cluster = Cluster()
    cluster.elect(1)
    payload = b"p" * 1024
    index = cluster.propose(1, payload)
    for node_id in (1, 2, 3):
        entry = cluster.hosts[node_id].applied_entries[-1]
        assert entry.index == index and entry.payload is payload
        stored = cluster.hosts[node_id].storage.entries(index, index + 1, 1 << 30)[0]
        assert stored.payload is payload


# --- §5.4.2, Figure 8 ----------------------------------------------------------------------------------------


def _figure_8_c() -> tuple[Cluster, int]:
    """Figure 8 up to (c): S1 leads term 4 and has copied X = (3, term 2) to S2 and S3, a majority of 5."""
    cluster = Cluster(ids=(1, 2, 3, 4, 5), config={"pre_vote": False, "check_quorum": False, "max_entries_per_msg": 1})
    cluster.elect(1)  # term 2, noop at 2 everywhere
    assert cluster.node(1).term == 2
    # (a) S1 appends X at index 3 and copies it to S2 only.
    cluster.partition((1, 2), (3, 4, 5))
    x_index = cluster.propose(1, b"X")
    assert x_index == 3
    # (b) S1 crashes; S5 is elected in term 3 by S3, S4, S5 and writes Y = its noop at index 3, then crashes.
    cluster.crash(1)
    cluster.heal()
    cluster.filters.append(lambda m: m.sender != 5 or m.type is MessageType.VOTE)
    cluster.campaign(5)
    assert cluster.node(5).role is Role.LEADER and cluster.node(5).term == 3
    assert cluster.node(5)._raft.log.term(3) == 3
    cluster.crash(5)
    cluster.filters.clear()
    # (c) S1 restarts and is elected in term 4; it copies X to S3 (not its own term-4 entry).
    cluster.restart(1)

    def only_x_reaches_followers(m: Message) -> bool:
        # Appends that would give a follower holding X the term-4 entry after it are lost (a probe that the
        # follower rejects still gets through, so S1 finds where to send X from).
        holds_x = cluster.node(m.to)._raft.log.term(3) == 2
        return not (m.type is MessageType.APP and holds_x and any(e.index > 3 for e in m.entries))

    cluster.filters.append(only_x_reaches_followers)
    cluster.campaign(1)
    if cluster.node(1).role is not Role.LEADER:
        cluster.campaign(1)  # its first try at term 3 meets voters who already voted for S5
    assert cluster.node(1).role is Role.LEADER and cluster.node(1).term == 4
    cluster.tick_all(3)
    progress = cluster.node(1).status().progress
    assert sum(1 for p in progress.values() if p.match >= x_index) >= 3  # X is stored on a majority...
    return cluster, x_index


def test_5_4_2_figure_8_a_leader_does_not_commit_an_old_term_entry_by_counting_replicas() -> None:
    cluster, x_index = _figure_8_c()
    # ...but it is from term 2, and S1 leads term 4: counting replicas must not commit it.
    assert cluster.node(1).status().commit < x_index
    # (d) Indeed, S1 crashes and S5 (last entry (3, 3)) can win with S2, S3, S4 and overwrite X everywhere.
    cluster.crash(1)
    cluster.filters.clear()
    cluster.restart(5)
    cluster.campaign(5)
    if cluster.node(5).role is not Role.LEADER:
        cluster.campaign(5)
    assert cluster.node(5).role is Role.LEADER
    cluster.tick_all(3)
    for node_id in (2, 3, 4, 5):
        assert cluster.node(node_id)._raft.log.term(3) == 3
        assert b"X" not in cluster.applied_payloads(node_id)


def test_5_4_2_figure_8_an_old_term_entry_commits_once_an_entry_of_the_current_term_does() -> None:
    cluster, x_index = _figure_8_c()
    # (e) S1 copies its term-4 entry to a majority: that commits it, and X before it.
    cluster.filters.clear()
    cluster.isolate(4)
    cluster.isolate(5)
    cluster.tick_all(3)
    assert cluster.node(1).status().commit >= x_index + 1
    assert cluster.applied_payloads(1) == [b"X"]
    # S5 can no longer be elected: S2 and S3 have a more up-to-date log.
    cluster.crash(1)
    cluster.heal()
    cluster.restart(5)
    cluster.campaign(5)
    cluster.campaign(5)
    assert cluster.node(5).role is not Role.LEADER


def test_a_peer_reported_unreachable_is_probed_instead_of_streamed_to() -> None:
    cluster = Cluster(config={"max_entries_per_msg": 1})
    cluster.elect(1)
    assert cluster.node(1).status().progress[3].state == "replicate"
    cluster.node(1).report_unreachable(3)
    assert cluster.node(1).status().progress[3].state == "probe"
    cluster.isolate(3)
    for i in range(5):
        cluster.node(1).propose(f"e{i}".encode())
    out = cluster.hosts[1].handle_ready()
    assert len([m for m in out if m.to == 3]) == 1  # one probe at a time, not the whole window
    assert len([m for m in out if m.to == 2]) == 5
    cluster.heal()
    cluster.tick_all(3)
    assert cluster.applied_payloads(3) == [f"e{i}".encode() for i in range(5)]
    assert cluster.node(1).status().progress[3].state == "replicate"
