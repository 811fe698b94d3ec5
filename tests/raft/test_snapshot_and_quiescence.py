"""Snapshots (InstallSnapshot for compacted logs) and quiescence (idle groups cost nothing)."""

from __future__ import annotations

from multiraft.raft import ConfChange, MessageType, Role

from .harness import Cluster, StateMachine

# --- snapshots -------------------------------------------------------------------------------------------------


def test_a_follower_whose_entries_were_compacted_away_receives_the_applications_snapshot() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.isolate(3)
    for i in range(10):
        cluster.propose(1, f"e{i}".encode())
    # The application says: everything up to the applied index is in my state.
    assert cluster.hosts[1].snapshot_and_compact(keep=0)
    snapshot_index = cluster.hosts[1].storage.snapshot().meta.index
    cluster.heal()
    cluster.tick_all(3)
    snaps = [line for line in cluster.transcript if line.startswith("1->3 SNAP")]
    assert snaps == [f"1->3 SNAP term=2 snapshot=({snapshot_index},2)"]
    assert cluster.applied_payloads(3) == [f"e{i}".encode() for i in range(10)]
    cluster.propose(1, b"after the snapshot")
    assert cluster.applied_payloads(3)[-1] == b"after the snapshot"
    assert cluster.node(1).status().progress[3].state == "replicate"


def test_a_follower_installs_the_snapshot_from_ready_before_appending_entries() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.isolate(3)
    for i in range(3):
        cluster.propose(1, f"e{i}".encode())
    cluster.hosts[1].snapshot_and_compact(keep=0)
    cluster.heal()
    cluster.tick_all(1, stabilize=False)
    cluster.process_all()
    while cluster.queue:
        message = cluster.queue.popleft()
        cluster.hosts[message.to].node.step(message)
        if message.type is MessageType.SNAP:
            rd = cluster.node(3).ready()
            assert message.snapshot is not None and rd.snapshot == message.snapshot
            assert rd.committed_entries == ()  # nothing to apply before the snapshot is installed
            assert [m.type for m in rd.persisted_messages] == [MessageType.APP_RESP]
            cluster.hosts[3].pending = rd
            cluster.hosts[3].persist()
            return
        cluster.process_all()
    raise AssertionError("no snapshot was sent")


def test_a_failed_snapshot_transfer_is_retried() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.isolate(3)
    cluster.propose(1, b"x")
    cluster.hosts[1].snapshot_and_compact(keep=0)
    cluster.heal()
    cluster.filters.append(lambda m: m.type is not MessageType.SNAP)
    cluster.tick_all(2)
    assert cluster.node(1).status().progress[3].state == "snapshot"
    cluster.node(1).report_snapshot(3, ok=False)  # the runtime could not ship it
    assert cluster.node(1).status().progress[3].state == "probe"
    cluster.filters.clear()
    cluster.tick_all(3)
    assert cluster.applied_payloads(3) == [b"x"]


def test_a_snapshot_older_than_the_followers_commit_is_ignored() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.propose(1, b"x")
    old = cluster.hosts[1].storage.snapshot()
    from multiraft.raft import Message

    before = cluster.node(2).status()
    cluster.node(2).step(Message(type=MessageType.SNAP, to=2, sender=1, term=before.term, snapshot=old))
    rd = cluster.node(2).ready()
    assert rd.snapshot is None
    assert [m.index for m in rd.persisted_messages] == [before.commit]
    cluster.node(2).advance(rd)


def test_snapshot_data_round_trips_the_application_state() -> None:
    state = StateMachine()
    for payload in (b"a", b"", b"ccc"):
        from multiraft.raft import Entry, EntryKind

        state.apply(Entry(state.applied_index + 1, 1, EntryKind.DATA, 0, payload))
    from multiraft.raft import Snapshot, SnapshotMeta

    copy = StateMachine.from_snapshot(Snapshot(SnapshotMeta(3, 1), state.to_snapshot_data()))
    assert (copy.applied_index, copy.chain, copy.payloads) == (3, state.chain, [b"a", b"", b"ccc"])


# --- quiescence ------------------------------------------------------------------------------------------------


def test_an_idle_group_whose_followers_caught_up_quiesces_and_then_sends_nothing() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.propose(1, b"x")
    cluster.tick_all(2)
    assert all(cluster.node(i).quiescent for i in (1, 2, 3))
    assert any("quiesce" in line for line in cluster.transcript)
    cluster.transcript.clear()
    for _ in range(100):
        for node_id in (1, 2, 3):
            cluster.node(node_id).tick()  # even if the runtime ticks it, a quiescent group does nothing
    cluster.stabilize()
    assert cluster.transcript == []
    assert not any(cluster.node(i).has_ready() for i in (1, 2, 3))


def test_a_quiescent_follower_does_not_answer_the_quiesce_heartbeat() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.transcript.clear()
    cluster.tick_all(1)
    quiesce = [line for line in cluster.transcript if "quiesce" in line]
    answers = [line for line in cluster.transcript if "HEARTBEAT_RESP" in line]
    assert len(quiesce) == 2 and answers == []


def test_a_proposal_wakes_a_quiescent_group() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.tick_all(2)
    assert cluster.node(1).quiescent
    cluster.node(1).propose(b"wake up")
    assert not cluster.node(1).quiescent
    cluster.stabilize()
    assert not cluster.node(2).quiescent and not cluster.node(3).quiescent
    assert cluster.applied_payloads(2) == [b"wake up"]
    cluster.tick_all(3)
    assert all(cluster.node(i).quiescent for i in (1, 2, 3))


def test_a_group_with_a_lagging_follower_does_not_quiesce() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.isolate(3)
    cluster.propose(1, b"3 lacks this")
    cluster.tick_all(5)
    assert not cluster.node(1).quiescent
    cluster.heal()
    cluster.tick_all(3)
    assert cluster.node(1).quiescent and cluster.node(3).quiescent


def test_a_follower_woken_after_its_leader_died_elects_a_new_leader() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.tick_all(2)
    assert cluster.node(2).quiescent
    cluster.crash(1)
    cluster.tick_all(50)
    assert cluster.leader() is None or cluster.leader() == 1  # quiescent followers never campaign alone
    cluster.node(2).wake()  # the runtime heard from SWIM that node 1 is dead
    cluster.node(3).wake()
    cluster.tick_all(40)
    assert cluster.leader() in (2, 3)


def test_a_follower_woken_by_a_non_leader_wakes_its_leader() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.tick_all(2)
    cluster.transcript.clear()
    cluster.node(2).wake()
    cluster.stabilize()
    assert cluster.transcript[0] == "2->1 HEARTBEAT_RESP term=2"
    assert not cluster.node(1).quiescent


def test_a_removed_leader_never_quiesces_before_handing_over() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.filters.append(lambda m: m.type is not MessageType.TIMEOUT_NOW)
    cluster.node(1).propose_conf_change(ConfChange.remove_node(1))
    cluster.tick_all(5)
    assert cluster.node(1).role is Role.LEADER and not cluster.node(1).quiescent


def test_quiescence_can_be_disabled() -> None:
    cluster = Cluster(config={"quiesce": False})
    cluster.elect(1)
    cluster.tick_all(5)
    assert not any(cluster.node(i).quiescent for i in (1, 2, 3))
