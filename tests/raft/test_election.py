"""Leader election: Raft §5.2 and §5.4.1, PreVote (thesis §9.6) and CheckQuorum (thesis §6.2)."""

from __future__ import annotations

import random

import pytest

from multiraft.raft import MemoryStorage, MessageType, NotLeader, RaftConfig, RawNode, Role

from .harness import Cluster


def test_5_2_a_follower_that_hears_from_no_leader_campaigns_and_wins_with_a_majority() -> None:
    cluster = Cluster(config={"pre_vote": False})
    # Election timeouts are in [10, 20): after 20 ticks somebody must have campaigned and won.
    cluster.tick_all(20)
    leader = cluster.leader()
    assert leader is not None
    term = cluster.node(leader).term
    assert all(cluster.node(i).term == term for i in (1, 2, 3))
    assert all(cluster.node(i).leader_id == leader for i in (1, 2, 3))
    assert sum(cluster.node(i).role is Role.LEADER for i in (1, 2, 3)) == 1


def test_5_2_election_timeouts_are_randomized_in_one_to_two_election_timeouts() -> None:
    timeouts = set()
    for seed in range(200):
        node = RawNode(RaftConfig(id=1, election_tick=10), MemoryStorage(), random.Random(seed))
        timeouts.add(node._raft.randomized_election_timeout)
    assert timeouts == set(range(10, 20))


def test_5_2_the_same_seed_draws_the_same_timeouts() -> None:
    def draws(seed: int) -> list[int]:
        node = RawNode(RaftConfig(id=1), MemoryStorage(), random.Random(seed))
        out = []
        for _ in range(5):
            node._raft.become_follower(node.term + 1, 0)
            out.append(node._raft.randomized_election_timeout)
        return out

    assert draws(7) == draws(7)


def test_5_2_a_candidate_without_a_majority_does_not_become_leader() -> None:
    cluster = Cluster(config={"pre_vote": False})
    cluster.isolate(1)
    cluster.campaign(1)
    assert cluster.node(1).role is Role.CANDIDATE
    assert cluster.node(1).term == 2
    cluster.tick(1, 40)
    cluster.stabilize()
    assert cluster.node(1).role is Role.CANDIDATE
    assert cluster.node(1).term > 2  # it keeps trying, in new terms


def test_5_2_a_node_grants_at_most_one_vote_per_term() -> None:
    cluster = Cluster(config={"pre_vote": False})
    cluster.campaign(1)
    assert cluster.node(1).role is Role.LEADER
    vote = cluster.node(2)._raft.vote
    assert vote == 1
    # A second candidate in the same term is refused by the node that already voted.
    cluster.node(3)._raft.become_follower(cluster.node(3).term, 0)
    cluster.node(3)._raft._campaign(pre=False, transfer=True)
    cluster.stabilize()
    assert cluster.node(2)._raft.vote in (1, 3)
    assert sum(cluster.node(i).role is Role.LEADER for i in (1, 2, 3)) == 1


def test_5_4_1_a_voter_refuses_a_candidate_whose_log_is_less_up_to_date() -> None:
    cluster = Cluster(config={"pre_vote": False, "check_quorum": False})
    cluster.elect(1)
    cluster.isolate(3)
    cluster.propose(1, b"x")  # 1 and 2 have an entry that 3 lacks
    cluster.heal()
    cluster.isolate(1)
    cluster.campaign(3)
    assert cluster.node(3).role is not Role.LEADER
    rejects = [line for line in cluster.transcript if line.startswith("2->3 VOTE_RESP") and "reject" in line]
    assert rejects
    cluster.campaign(2)
    assert cluster.node(2).role is Role.LEADER


def test_a_restarted_node_remembers_its_vote() -> None:
    cluster = Cluster(config={"pre_vote": False})
    cluster.campaign(1)
    term = cluster.node(2).term
    cluster.crash(2)
    cluster.restart(2)
    assert cluster.node(2).term == term
    assert cluster.node(2)._raft.vote == 1


def test_a_single_voter_group_elects_itself_without_messages() -> None:
    cluster = Cluster(ids=(1,))
    cluster.campaign(1)
    assert cluster.node(1).role is Role.LEADER
    assert cluster.transcript == []


def test_pre_vote_a_partitioned_node_that_rejoins_does_not_depose_a_healthy_leader() -> None:
    cluster = Cluster()
    cluster.elect(1)
    term = cluster.node(1).term
    cluster.isolate(3)
    for _ in range(100):  # node 3 times out again and again while cut off
        cluster.tick(3)
        cluster.tick_all(1)
    assert cluster.node(3).term == term  # pre-votes never raised its term
    cluster.heal()
    cluster.tick_all(30)
    assert cluster.node(1).role is Role.LEADER
    assert cluster.node(1).term == term
    assert cluster.node(3).leader_id == 1


def test_without_pre_vote_a_rejoining_node_forces_a_new_election() -> None:
    cluster = Cluster(config={"pre_vote": False, "check_quorum": False})
    cluster.elect(1)
    term = cluster.node(1).term
    cluster.isolate(3)
    cluster.tick(3, 40)
    cluster.stabilize()
    assert cluster.node(3).term > term
    cluster.heal()
    cluster.tick_all(40)
    assert cluster.node(1).term > term  # the old leader was deposed by the higher term


def test_check_quorum_a_leader_that_cannot_hear_a_majority_steps_down_within_an_election_timeout() -> None:
    cluster = Cluster(config={"quiesce": False})
    cluster.elect(1)
    cluster.isolate(1)
    # Two election timeouts: the first check may fall right after recent heartbeats were answered.
    for _ in range(2 * 10):
        cluster.tick(1)
        cluster.stabilize()
    assert cluster.node(1).role is Role.FOLLOWER
    with pytest.raises(NotLeader):
        cluster.node(1).propose(b"stale write")


def test_check_quorum_a_quiescent_leader_cut_off_steps_down_once_a_proposal_wakes_it() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.tick_all(2)
    assert cluster.node(1).quiescent
    cluster.isolate(1)
    cluster.node(1).propose(b"wakes the leader")
    assert not cluster.node(1).quiescent
    for _ in range(2 * 10):
        cluster.tick(1)
        cluster.stabilize()
    assert cluster.node(1).role is Role.FOLLOWER


def test_check_quorum_a_stale_leader_never_commits_what_it_accepted() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.isolate(1)
    index = cluster.node(1).propose(b"accepted but never committed")
    cluster.stabilize()
    cluster.tick_all(40)  # 2 and 3 elect a new leader; 1 steps down
    new_leader = cluster.leader()
    assert new_leader in (2, 3)
    assert cluster.node(1).role is not Role.LEADER  # stepped down (and may be pre-voting, harmlessly)
    cluster.heal()
    cluster.propose(new_leader, b"after")
    cluster.tick_all(5)
    for node_id in (1, 2, 3):
        assert b"accepted but never committed" not in cluster.applied_payloads(node_id)
        assert cluster.applied_payloads(node_id)[-1] == b"after"
    assert cluster.node(1)._raft.log.term(index) == cluster.node(new_leader).term


def test_check_quorum_followers_ignore_vote_requests_while_they_hear_from_a_leader() -> None:
    cluster = Cluster(config={"pre_vote": False})
    cluster.elect(1)
    term = cluster.node(1).term
    # Node 3 is cut off from the leader only, and campaigns; node 2 still hears the leader and ignores it.
    cluster.cut(1, 3)
    for _ in range(40):
        cluster.tick(3)
        cluster.tick(1)
        cluster.tick(2)
        cluster.stabilize()
    assert cluster.node(1).role is Role.LEADER
    assert cluster.node(2).term == term
    assert not any(line.startswith("2->3 VOTE_RESP") for line in cluster.transcript)


def test_leader_transfer_votes_override_the_lease() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.node(1).transfer_leader(2)
    cluster.stabilize()
    assert cluster.node(2).role is Role.LEADER
    assert any("VOTE" in line and "transfer" in line for line in cluster.transcript)


def test_vote_requests_wait_for_the_persist_of_the_candidates_term() -> None:
    cluster = Cluster(config={"pre_vote": False})
    node = cluster.node(1)
    node.campaign()
    rd = node.ready()
    assert rd.hard_state is not None and rd.hard_state.vote == 1
    assert rd.must_sync
    assert not [m for m in rd.messages if m.type is MessageType.VOTE]
    assert {m.to for m in rd.persisted_messages if m.type is MessageType.VOTE} == {2, 3}
    node.advance(rd)


# --- delayed elections: one replica of a group gets the first turn after a restart ----------------------


def test_a_delayed_replica_campaigns_only_after_its_election_timeout_and_the_delay() -> None:
    cluster = Cluster()
    cluster.node(1).delay_election(30)
    # Its randomized timeout is below 20 ticks: without the delay it would have campaigned by now.
    cluster.tick(1, 29)
    cluster.stabilize()
    assert cluster.node(1).role is Role.FOLLOWER
    assert cluster.node(1).term == cluster.node(2).term
    cluster.tick(1, 21)
    cluster.stabilize()
    assert cluster.leader() == 1


def test_while_the_others_are_delayed_the_undelayed_replica_wins_every_seeded_election() -> None:
    for seed in range(50):
        cluster = Cluster(seed=seed)
        cluster.node(2).delay_election(40)
        cluster.node(3).delay_election(40)
        cluster.tick_all(20)
        assert cluster.leader() == 1, (seed, cluster.status_line())
        assert [cluster.node(i).leader_id for i in (1, 2, 3)] == [1, 1, 1]


def test_a_delayed_replica_still_grants_its_vote() -> None:
    cluster = Cluster()
    cluster.node(2).delay_election(100)
    cluster.node(3).delay_election(100)
    cluster.isolate(3)
    cluster.elect(1)  # a majority of 1 and the delayed 2
    assert cluster.node(2).leader_id == 1


def test_a_delay_of_zero_ends_a_delay() -> None:
    cluster = Cluster()
    cluster.node(1).delay_election(100)
    cluster.node(1).delay_election(0)
    cluster.tick(1, 20)
    cluster.stabilize()
    assert cluster.leader() == 1


def test_a_delay_does_not_extend_the_lease_of_a_follower_that_knows_its_leader() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.node(2).delay_election(100)
    assert cluster.node(2)._raft.election_elapsed >= 0
    cluster.node(1).delay_election(100)  # a leader: no effect
    assert cluster.node(1)._raft.election_elapsed >= 0


def test_a_campaign_ends_the_delay_so_that_a_lost_pre_vote_is_retried_after_an_election_timeout() -> None:
    cluster = Cluster()
    cluster.node(1).delay_election(100)
    cluster.isolate(1)
    cluster.campaign(1)  # its pre-vote goes nowhere
    assert cluster.node(1).role is Role.PRE_CANDIDATE
    cluster.heal()
    cluster.node(2).delay_election(100)
    cluster.node(3).delay_election(100)
    cluster.tick_all(20)
    assert cluster.leader() == 1


def test_a_delay_ends_when_the_candidate_it_gave_way_to_cannot_win_with_its_log() -> None:
    cluster = Cluster()
    cluster.elect(2)
    cluster.isolate(1)
    cluster.propose(2, b"x")  # 2 and 3 hold an entry that 1 lacks
    cluster.heal()
    for node_id in (1, 2, 3):  # a full restart: no leader known, 2 and 3 give 1 the first turn
        cluster.restart(node_id)
    cluster.node(2).delay_election(1_000)
    cluster.node(3).delay_election(1_000)
    cluster.campaign(1)  # refused: its log is behind
    assert cluster.leader() is None
    cluster.tick_all(40)
    assert cluster.leader() in (2, 3)
