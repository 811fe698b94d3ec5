"""Leadership transfer (thesis §3.10, TimeoutNow) and ReadIndex (thesis §6.4) linearizable reads."""

from __future__ import annotations

import pytest

from multiraft.raft import InvalidRequestError, MessageType, NotLeader, ProposalDropped, Role

from .harness import Cluster

# --- leadership transfer ---------------------------------------------------------------------------------------


def test_transfer_to_a_caught_up_follower_makes_it_leader_in_the_next_term() -> None:
    cluster = Cluster()
    cluster.elect(1)
    term = cluster.node(1).term
    cluster.transcript.clear()
    cluster.node(1).transfer_leader(3)
    cluster.stabilize()
    assert cluster.leader() == 3
    assert cluster.node(3).term == term + 1
    assert cluster.transcript[0] == f"1->3 TIMEOUT_NOW term={term}"
    assert not any("PRE_VOTE" in line for line in cluster.transcript)  # a transfer skips the pre-vote


def test_transfer_to_a_lagging_follower_first_brings_it_up_to_date() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.isolate(3)
    for i in range(5):
        cluster.propose(1, f"e{i}".encode())
    cluster.heal()
    cluster.transcript.clear()
    cluster.node(1).transfer_leader(3)
    with pytest.raises(ProposalDropped):
        cluster.node(1).propose(b"during transfer")
    cluster.tick_all(2)  # the next heartbeat answer resumes the probe of node 3
    assert cluster.leader() == 3
    timeout_now = cluster.transcript.index(next(line for line in cluster.transcript if "TIMEOUT_NOW" in line))
    appends = [i for i, line in enumerate(cluster.transcript) if line.startswith("1->3 APP ") and "entries" in line]
    assert appends and max(appends) < timeout_now
    assert cluster.applied_payloads(3) == [f"e{i}".encode() for i in range(5)]


def test_a_transfer_that_does_not_complete_within_an_election_timeout_is_aborted() -> None:
    cluster = Cluster(config={"quiesce": False})
    cluster.elect(1)
    cluster.isolate(3)
    cluster.propose(1, b"3 lacks this")
    cluster.node(1).transfer_leader(3)
    assert cluster.node(1).status().lead_transferee == 3
    for _ in range(10):
        cluster.tick(1)
        cluster.stabilize()
    assert cluster.node(1).status().lead_transferee == 0
    assert cluster.node(1).role is Role.LEADER
    cluster.propose(1, b"accepted again")


def test_a_transfer_requested_on_a_follower_is_forwarded_to_the_leader() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.node(2).transfer_leader(2)
    cluster.stabilize()
    assert cluster.leader() == 2
    assert any(line.startswith("2->1 TRANSFER_LEADER") and line.endswith("target=2") for line in cluster.transcript)


def test_leadership_cannot_be_transferred_to_a_learner_or_a_stranger() -> None:
    cluster = Cluster(ids=(1, 2), learners=(3,))
    cluster.elect(1)
    with pytest.raises(InvalidRequestError):
        cluster.node(1).transfer_leader(3)
    with pytest.raises(InvalidRequestError):
        cluster.node(1).transfer_leader(9)
    lonely = Cluster()
    with pytest.raises(NotLeader):
        lonely.node(1).transfer_leader(2)


# --- ReadIndex -------------------------------------------------------------------------------------------------


def test_read_index_on_the_leader_is_confirmed_by_a_quorum_without_writing_to_the_log() -> None:
    cluster = Cluster()
    cluster.elect(1)
    index = cluster.propose(1, b"x")
    last = cluster.node(1).status().last_index
    cluster.transcript.clear()
    cluster.node(1).read_index(b"read-1")
    cluster.stabilize()
    assert cluster.hosts[1].read_states == [(index, b"read-1")]
    assert cluster.node(1).status().last_index == last
    assert any(" HEARTBEAT " in line and "read=" in line for line in cluster.transcript)


def test_read_index_batches_reads_into_one_heartbeat_round() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.transcript.clear()
    for i in range(10):
        cluster.node(1).read_index(f"r{i}".encode())
    cluster.stabilize()
    assert [ctx for _, ctx in cluster.hosts[1].read_states] == [f"r{i}".encode() for i in range(10)]
    assert sum(1 for line in cluster.transcript if line.startswith("1->2 HEARTBEAT")) == 1


def test_read_index_on_a_follower_is_answered_by_the_leader() -> None:
    cluster = Cluster()
    cluster.elect(1)
    index = cluster.propose(1, b"x")
    cluster.node(3).read_index(b"follower read")
    cluster.stabilize()
    assert cluster.hosts[3].read_states == [(index, b"follower read")]
    assert cluster.hosts[3].state.applied_index >= index


def test_a_new_leader_answers_reads_only_after_committing_an_entry_of_its_term() -> None:
    cluster = Cluster()
    cluster.node(1).campaign()
    while cluster.node(1).role is not Role.LEADER:
        cluster.process_all()
        cluster.deliver_one()
    cluster.node(1).read_index(b"early")
    assert cluster.hosts[1].read_states == []
    cluster.stabilize()
    assert cluster.hosts[1].read_states == [(cluster.node(1).status().commit, b"early")]


def test_a_leader_cut_off_from_the_majority_cannot_answer_a_read() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.isolate(1)
    cluster.node(1).read_index(b"stale?")
    cluster.stabilize()
    cluster.tick_all(30)
    assert cluster.hosts[1].read_states == []


def test_read_index_without_a_known_leader_raises_not_leader() -> None:
    cluster = Cluster()
    with pytest.raises(NotLeader):
        cluster.node(2).read_index(b"x")


def test_a_single_voter_answers_reads_at_once() -> None:
    cluster = Cluster(ids=(1,))
    cluster.elect(1)
    cluster.node(1).read_index(b"solo")
    cluster.stabilize()
    assert cluster.hosts[1].read_states == [(cluster.node(1).status().commit, b"solo")]
    assert not [m for m in cluster.transcript if MessageType.HEARTBEAT.name in m]
