"""Configuration changes (Raft thesis §4 / paper §6): learners, simple changes, joint consensus, removing the leader."""

from __future__ import annotations

import pytest

from multiraft.raft import (
    ConfChange,
    ConfChangePending,
    ConfChangeSingle,
    ConfChangeTransition,
    ConfChangeType,
    ConfState,
    InvalidConfChangeError,
    Message,
    MessageType,
    ProposalDropped,
    Role,
)

from .harness import Cluster


def _change(node_id: int, kind: ConfChangeType) -> ConfChangeSingle:
    return ConfChangeSingle(kind, node_id)


def test_6_a_learner_catches_up_without_voting_and_is_then_promoted_to_voter() -> None:
    cluster = Cluster()
    cluster.elect(1)
    for i in range(5):
        cluster.propose(1, f"before{i}".encode())
    cluster.add_node(4)
    cluster.node(1).propose_conf_change(ConfChange.add_learner(4))
    cluster.stabilize()
    cluster.tick_all(3)
    assert cluster.node(1).conf_state == ConfState.of((1, 2, 3), learners=(4,))
    assert cluster.applied_payloads(4) == [f"before{i}".encode() for i in range(5)]
    assert cluster.node(4).conf_state.learners == (4,)
    cluster.node(1).propose_conf_change(ConfChange.add_voter(4))
    cluster.stabilize()
    cluster.tick_all(2)
    for node_id in (1, 2, 3, 4):
        assert cluster.node(node_id).conf_state == ConfState.of((1, 2, 3, 4))


def test_6_a_learner_never_counts_toward_a_commit_and_cannot_depose_a_live_leader() -> None:
    cluster = Cluster(ids=(1, 2), learners=(3,))
    cluster.elect(1)
    term = cluster.node(1).term
    cluster.isolate(2)
    index = cluster.node(1).propose(b"needs node 2")
    cluster.stabilize()
    assert cluster.node(1).status().commit < index  # the learner's copy does not make a majority
    assert cluster.node(3).status().last_index >= index
    cluster.heal()
    cluster.cut(1, 3)
    for _ in range(60):  # the learner hears nothing and times out again and again
        cluster.tick(3)
        cluster.tick(1)
        cluster.tick(2)
        cluster.stabilize()
    assert cluster.leader() == 1 and cluster.node(1).term == term
    assert not any(line.startswith("2->3 PRE_VOTE_RESP") and "granted" in line for line in cluster.transcript)


def test_6_replacing_a_voter_in_one_step_goes_through_a_joint_configuration_and_leaves_it() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.add_node(4)
    cluster.node(1).propose_conf_change(ConfChange.add_learner(4))
    cluster.tick_all(3)
    replace = ConfChange((_change(3, ConfChangeType.REMOVE_NODE), _change(4, ConfChangeType.ADD_VOTER)))
    cluster.node(1).propose_conf_change(replace)
    joint_seen = []
    for _ in range(5):
        cluster.process_all()
        joint_seen.append(cluster.node(1).conf_state.joint)
        cluster.deliver_one()
    cluster.tick_all(3)
    assert any(joint_seen)
    for node_id in (1, 2, 4):
        assert cluster.node(node_id).conf_state == ConfState.of((1, 2, 4))


def test_6_in_a_joint_configuration_commits_need_a_majority_of_both_old_and_new_voters() -> None:
    cluster = Cluster(ids=(1, 2, 3))
    cluster.elect(1)
    for node_id in (4, 5):
        cluster.add_node(node_id)
    explicit = ConfChange(
        (
            _change(2, ConfChangeType.REMOVE_NODE),
            _change(3, ConfChangeType.REMOVE_NODE),
            _change(4, ConfChangeType.ADD_VOTER),
            _change(5, ConfChangeType.ADD_VOTER),
        ),
        ConfChangeTransition.JOINT_EXPLICIT,
    )
    cluster.node(1).propose_conf_change(explicit)
    cluster.tick_all(3)
    conf = cluster.node(1).conf_state
    assert conf.joint and conf.voters == (1, 4, 5) and conf.voters_outgoing == (1, 2, 3)
    # Old voters 2 and 3 gone: the new majority {1, 4, 5} alone cannot commit.
    cluster.isolate(2)
    cluster.isolate(3)
    index = cluster.node(1).propose(b"joint")
    cluster.stabilize()
    assert cluster.node(1).status().commit < index
    cluster.heal()
    cluster.tick_all(2)
    assert cluster.node(1).status().commit >= index
    # Leaving explicitly ends the joint phase.
    cluster.node(1).propose_conf_change(ConfChange.leave_joint())
    cluster.tick_all(3)
    assert cluster.node(1).conf_state == ConfState.of((1, 4, 5))


def test_6_removing_the_leader_hands_leadership_to_a_remaining_voter() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.propose(1, b"before")
    cluster.node(1).propose_conf_change(ConfChange.remove_node(1))
    cluster.stabilize()
    with pytest.raises(ProposalDropped):
        cluster.node(1).propose(b"refused by a removed leader")
    cluster.tick_all(3)
    leader = cluster.leader()
    assert leader in (2, 3)
    assert cluster.node(leader).conf_state.voters == (2, 3)
    assert any(line.startswith("1->") and "TIMEOUT_NOW" in line for line in cluster.transcript)
    assert cluster.node(1).role is Role.FOLLOWER
    cluster.propose(leader, b"after")
    cluster.tick_all(2)
    for node_id in (2, 3):
        assert cluster.applied_payloads(node_id) == [b"before", b"after"]


def test_6_a_removed_leader_in_a_single_voter_replacement_does_not_strand_the_new_voter() -> None:
    cluster = Cluster(ids=(1,))
    cluster.elect(1)
    cluster.add_node(2)
    cluster.node(1).propose_conf_change(ConfChange.add_learner(2))
    cluster.tick_all(3)
    replace = ConfChange((_change(1, ConfChangeType.REMOVE_NODE), _change(2, ConfChangeType.ADD_VOTER)))
    cluster.node(1).propose_conf_change(replace)
    cluster.tick_all(10)
    assert cluster.leader() == 2
    assert cluster.node(2).conf_state == ConfState.of((2,))


def test_6_only_one_configuration_change_may_be_pending() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.add_node(4)
    cluster.node(1).propose_conf_change(ConfChange.add_learner(4))
    with pytest.raises(ConfChangePending):
        cluster.node(1).propose_conf_change(ConfChange.add_voter(4))
    cluster.stabilize()
    cluster.node(1).propose_conf_change(ConfChange.add_voter(4))


def test_6_a_new_leader_accepts_a_configuration_change_only_after_applying_the_log_it_inherited() -> None:
    cluster = Cluster(config={"pre_vote": False, "check_quorum": False})
    cluster.elect(1)
    cluster.filters.append(lambda m: m.to != 1)  # acknowledgements never reach node 1: x is not committed
    cluster.node(1).propose(b"x")
    cluster.stabilize()
    cluster.crash(1)
    cluster.filters.clear()
    cluster.node(2).campaign()
    while cluster.node(2).role is not Role.LEADER:
        cluster.process_all()
        cluster.deliver_one()
    # x might have been a configuration change: none may be proposed before what we inherited is applied.
    assert cluster.node(2).status().applied < cluster.node(2).status().last_index
    with pytest.raises(ConfChangePending):
        cluster.node(2).propose_conf_change(ConfChange.add_learner(4))
    cluster.stabilize()
    cluster.node(2).propose_conf_change(ConfChange.add_learner(4))


def test_6_changes_that_cannot_apply_are_rejected_before_reaching_the_log() -> None:
    cluster = Cluster()
    cluster.elect(1)
    last = cluster.node(1).status().last_index
    with pytest.raises(InvalidConfChangeError):
        cluster.node(1).propose_conf_change(ConfChange.leave_joint())
    two_voters_simple = ConfChange(
        (_change(2, ConfChangeType.REMOVE_NODE), _change(4, ConfChangeType.ADD_VOTER)), ConfChangeTransition.AUTO
    )
    cluster.node(1).propose_conf_change(two_voters_simple)  # AUTO: joint, not an error
    cluster.tick_all(3)
    with pytest.raises(InvalidConfChangeError):
        cluster.node(1).propose_conf_change(
            ConfChange(
                (
                    _change(1, ConfChangeType.REMOVE_NODE),
                    _change(3, ConfChangeType.REMOVE_NODE),
                    _change(4, ConfChangeType.REMOVE_NODE),
                )
            )
        )
    assert cluster.node(1).status().last_index > last


def test_6_a_node_added_later_learns_the_configuration_from_a_snapshot_and_the_log() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.add_node(4)
    cluster.node(1).propose_conf_change(ConfChange.add_learner(4))
    cluster.tick_all(3)
    assert any("SNAP" in line and "->4" in line for line in cluster.transcript)
    assert cluster.node(4).conf_state == ConfState.of((1, 2, 3), learners=(4,))


def test_6_a_demoted_voter_keeps_voting_in_the_old_configuration_until_the_joint_phase_ends() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.add_node(4)
    cluster.node(1).propose_conf_change(ConfChange.add_learner(4))
    cluster.tick_all(3)
    swap = ConfChange(
        (_change(3, ConfChangeType.ADD_LEARNER), _change(4, ConfChangeType.ADD_VOTER)),
        ConfChangeTransition.JOINT_EXPLICIT,
    )
    cluster.node(1).propose_conf_change(swap)
    cluster.tick_all(3)
    conf = cluster.node(1).conf_state
    assert (conf.voters, conf.voters_outgoing, conf.learners_next) == ((1, 2, 4), (1, 2, 3), (3,))
    # With 2 cut off, C_old = {1, 2, 3} still has a majority only thanks to node 3, the voter being demoted.
    cluster.isolate(2)
    index = cluster.node(1).propose(b"needs node 3")
    cluster.stabilize()
    assert cluster.node(1).status().commit >= index
    cluster.heal()
    cluster.node(1).propose_conf_change(ConfChange.leave_joint())
    cluster.tick_all(3)
    assert cluster.node(1).conf_state == ConfState.of((1, 2, 4), learners=(3,))
    # Now node 3 is a learner: it keeps receiving the log but no longer counts.
    cluster.isolate(2)
    cluster.isolate(4)
    index = cluster.node(1).propose(b"learner copy does not count")
    cluster.stabilize()
    assert cluster.node(1).status().commit < index
    assert cluster.node(3).status().last_index >= index
    assert not [line for line in cluster.transcript if line.startswith("3->") and "VOTE " in line]


# --- who may campaign (etcd's promotable()) ------------------------------------------------------------------


def _tick_alone(cluster: Cluster, node_id: int, ticks: int) -> None:
    for _ in range(ticks):
        cluster.tick(node_id)
        cluster.stabilize()


def test_6_a_cut_off_learner_never_raises_the_term_so_it_cannot_depose_a_healthy_leader_without_prevote() -> None:
    cluster = Cluster(ids=(1, 2, 3), learners=(4,), config={"pre_vote": False, "check_quorum": False})
    cluster.elect(1)
    term = cluster.node(1).term
    cluster.isolate(4)
    _tick_alone(cluster, 4, 100)  # many election timeouts without hearing the leader
    assert cluster.node(4).term == term and cluster.node(4).role is Role.FOLLOWER
    cluster.heal()
    cluster.tick_all(5)
    assert cluster.leader() == 1 and cluster.node(1).term == term
    assert not [line for line in cluster.transcript if line.startswith("4->") and "VOTE" in line]


def test_6_a_learner_ignores_campaign_requests_and_timeout_now() -> None:
    cluster = Cluster(ids=(1, 2, 3), learners=(4,))
    cluster.elect(1)
    term = cluster.node(1).term
    cluster.node(4).campaign()
    cluster.node(4).step(Message(type=MessageType.TIMEOUT_NOW, to=4, sender=1, term=term))
    cluster.stabilize()
    assert cluster.node(4).role is Role.FOLLOWER and cluster.node(4).term == term
    assert cluster.leader() == 1 and cluster.node(1).term == term


def test_6_a_replica_that_applied_its_own_removal_never_campaigns_again() -> None:
    cluster = Cluster(config={"pre_vote": False, "check_quorum": False})
    cluster.elect(1)
    cluster.cut(1, 2)  # the removal commits with node 3's own copy, so the leader tells node 3 it committed
    cluster.node(1).propose_conf_change(ConfChange.remove_node(3))
    cluster.stabilize()
    cluster.heal()
    cluster.tick_all(3)
    assert cluster.node(3).conf_state.voters == (1, 2)  # node 3 learned of its removal by applying it
    term = cluster.node(1).term
    cluster.isolate(3)
    _tick_alone(cluster, 3, 100)
    cluster.node(3).campaign()
    assert cluster.node(3).term == term and cluster.node(3).role is Role.FOLLOWER
    cluster.heal()
    cluster.tick_all(5)
    assert cluster.leader() == 1 and cluster.node(1).term == term


def test_6_a_promoted_learner_campaigns_only_once_it_has_applied_its_promotion() -> None:
    cluster = Cluster(ids=(1, 2), learners=(3,))
    cluster.elect(1)
    cluster.filters.append(lambda m: m.to != 3)  # node 3 never hears of its promotion
    cluster.node(1).propose_conf_change(ConfChange.add_voter(3))
    cluster.tick_all(3)
    assert cluster.node(2).conf_state.voters == (1, 2, 3)
    assert cluster.node(3).conf_state.learners == (3,)
    # The leader dies. Node 3 still believes it is a learner and does not campaign, but it answers node 2,
    # whose configuration counts it: the surviving majority {2, 3} elects node 2.
    cluster.crash(1)
    cluster.filters.clear()
    term = cluster.node(3).term
    cluster.node(3).campaign()
    assert cluster.node(3).term == term
    cluster.tick_all(40)  # both time out; only node 2 campaigns
    assert cluster.leader() == 2
    assert not [line for line in cluster.transcript if line.startswith("3->") and "VOTE " in line]
    cluster.propose(2, b"after the promotion")
    cluster.tick_all(3)
    assert cluster.node(3).conf_state.voters == (1, 2, 3)  # it learned its status from the log
    # Now a voter, node 3 campaigns and wins when it must.
    cluster.crash(2)
    cluster.restart(1)
    cluster.elect(3)


def test_6_a_removed_voter_that_acknowledged_its_removal_after_the_commit_still_applies_it() -> None:
    """The leader tells a replica it removed that the removal committed (issue 23): without that, a replica
    whose own acknowledgement came after the commit never hears of the commit, its node cannot tell a removal
    from a lost log, and a replica placed there again could not vote."""
    cluster = Cluster()
    cluster.elect(1)
    held: list[Message] = []

    def hold_for_3(m: Message) -> bool:
        if m.to == 3:
            held.append(m)
            return False
        return True

    cluster.filters.append(hold_for_3)  # everything to node 3 is late: the removal commits with node 2 alone
    cluster.node(1).propose_conf_change(ConfChange.remove_node(3))
    cluster.stabilize()
    assert cluster.node(1).conf_state.voters == (1, 2)
    cluster.filters.clear()
    cluster.queue.extend(held)  # delivered late, in the order sent
    cluster.stabilize()
    assert cluster.node(3).conf_state.voters == (1, 2)  # it applied its own removal: its node may drop it


def test_6_the_leader_tells_each_replica_it_removes_that_the_removal_committed() -> None:
    cluster = Cluster(ids=(1, 2, 3, 4))
    cluster.elect(1)
    cluster.propose(1, b"before")
    cluster.node(1).propose_conf_change(ConfChange.remove_node(4))
    cluster.stabilize()
    assert cluster.node(1).conf_state.voters == (1, 2, 3)
    assert cluster.node(4).conf_state.voters == (1, 2, 3)  # applied its own removal: its node may drop it
