"""A replica whose disk lost entries it had acknowledged (a damaged suffix cut off by the node's repair) must
not help elect a leader that lacks them, and gets them back from the leader (``RawNode(recover_until=...)``).

The seeded simulation (``tests/raft/simulation.py``) loses durable suffixes, committed entries included, at
crashes and checks every safety invariant; these scenarios pin each rule down.
"""

from __future__ import annotations

import random

import pytest

from multiraft.raft import (
    UNKNOWN_VOTE,
    HardState,
    MemoryStorage,
    Message,
    MessageType,
    RaftConfig,
    RaftStorageError,
    RawNode,
    Role,
    decode_message,
    encode_message,
)

from .harness import Cluster


def _lose_suffix(cluster: Cluster, node_id: int, keep: int) -> tuple[int, int]:
    """Crash ``node_id`` and cut its log after ``keep`` (white-box on MemoryStorage); returns its former last
    entry, which the runtime persists before cutting."""
    cluster.crash(node_id)
    storage = cluster.hosts[node_id].storage
    assert isinstance(storage, MemoryStorage)
    last = storage.last_index()
    before = (last, storage.term(last))
    del storage._entries[keep - storage._offset :]
    return before


def _three_nodes_with_entries(count: int, **config: object) -> Cluster:
    cluster = Cluster(config={"quiesce": False, **config})
    cluster.elect(1)
    for i in range(count):
        cluster.propose(1, b"e%d" % i)
    return cluster


def test_a_recovering_replica_refuses_votes_to_a_candidate_lacking_what_it_lost() -> None:
    cluster = _three_nodes_with_entries(5)
    last = cluster.node(1).status().last_index
    # Node 3 never got the last entries; node 2 lost them with its damaged suffix.
    cluster.crash(1)
    before = _lose_suffix(cluster, 2, keep=3)
    cluster.restart(2, recover_until=before)
    candidate = Message(type=MessageType.VOTE, to=2, sender=3, term=5, index=3, log_term=before[1])
    cluster.node(2).step(candidate)
    cluster.process(2)
    answers = [m for m in cluster.queue if m.type is MessageType.VOTE_RESP]
    assert answers and answers[-1].reject
    assert cluster.node(2).recovering_until == last


@pytest.mark.parametrize("pre_vote", [True, False])
def test_a_recovering_replica_grants_a_vote_to_a_candidate_holding_its_lost_log(pre_vote: bool) -> None:
    cluster = _three_nodes_with_entries(5)
    cluster.crash(1)
    before = _lose_suffix(cluster, 2, keep=3)
    cluster.restart(2, recover_until=before)
    kind = MessageType.PRE_VOTE if pre_vote else MessageType.VOTE
    cluster.node(2).step(Message(type=kind, to=2, sender=3, term=5, index=before[0], log_term=before[1]))
    cluster.process(2)
    answers = [m for m in cluster.queue if m.type in (MessageType.VOTE_RESP, MessageType.PRE_VOTE_RESP)]
    assert answers and not answers[-1].reject


def test_a_recovering_replica_never_campaigns_it_announces_its_loss_instead() -> None:
    cluster = _three_nodes_with_entries(3)
    before = _lose_suffix(cluster, 2, keep=2)
    cluster.restart(2, recover_until=before)
    cluster.crash(1)  # no leader to repair it: it must still not stand
    cluster.tick(2, 40)
    cluster.process(2)
    assert cluster.node(2).role is Role.FOLLOWER
    sent = list(cluster.queue)
    assert not [m for m in sent if m.type in (MessageType.VOTE, MessageType.PRE_VOTE)]
    lost = [m for m in sent if m.type is MessageType.APP_RESP and m.log_lost]
    assert {m.to for m in lost} == {1, 3} and all(m.reject_hint == 2 and m.index == 0 for m in lost)


def test_the_leader_resends_what_a_follower_lost_though_it_counted_it_as_matched() -> None:
    cluster = _three_nodes_with_entries(6)
    leader = cluster.node(1)
    last = leader.status().last_index
    assert leader.status().progress[2].match == last
    before = _lose_suffix(cluster, 2, keep=2)
    cluster.restart(2, recover_until=before)
    # The leader still believes node 2 holds everything, so it sends nothing but heartbeats; node 2's answer
    # to a heartbeat says what it lost.
    cluster.tick_all(3)
    assert cluster.node(2).status().last_index == last
    assert cluster.node(2).recovering_until == 0
    assert leader.status().progress[2].match == last
    assert [bytes(e.payload) for e in cluster.hosts[2].storage.entries(3, last + 1, 1 << 30)] == [
        bytes(e.payload) for e in cluster.hosts[1].storage.entries(3, last + 1, 1 << 30)
    ]


def test_a_recovering_replica_woken_by_an_idle_leader_gets_its_entries_back() -> None:
    cluster = Cluster()  # quiescence on: the idle leader sends nothing at all
    cluster.elect(1)
    for i in range(4):
        cluster.propose(1, b"e%d" % i)
    cluster.tick_all(5)
    assert cluster.node(1).quiescent
    last = cluster.node(1).status().last_index
    before = _lose_suffix(cluster, 3, keep=2)
    cluster.restart(3, recover_until=before)
    cluster.tick_all(40)
    assert cluster.node(3).status().last_index == last
    assert cluster.node(3).recovering_until == 0


def test_a_recovered_replica_votes_and_campaigns_again() -> None:
    cluster = _three_nodes_with_entries(3, check_quorum=False)  # no leader lease to wait out
    before = _lose_suffix(cluster, 2, keep=1)
    cluster.restart(2, recover_until=before)
    cluster.tick_all(3)
    assert cluster.node(2).recovering_until == 0
    cluster.crash(1)
    cluster.elect(2)


def test_a_commit_index_beyond_the_cut_log_is_clamped_only_when_recovering() -> None:
    conf_cluster = Cluster(ids=(1,))
    conf_cluster.elect(1)
    for i in range(4):
        conf_cluster.propose(1, b"e%d" % i)
    storage = conf_cluster.hosts[1].storage
    assert isinstance(storage, MemoryStorage)
    hard = storage.hard_state()
    assert hard.commit == storage.last_index()
    del storage._entries[2 - storage._offset :]
    assert storage.last_index() == 2 and hard.commit > 2
    with pytest.raises(RaftStorageError):
        RawNode(RaftConfig(id=1), storage, random.Random(0))
    node = RawNode(RaftConfig(id=1), storage, random.Random(0), applied=hard.commit, recover_until=(5, hard.term))
    status = node.status()
    assert (status.commit, status.applied) == (2, 2)
    assert node.recovering_until == 5
    assert storage.hard_state() == HardState(hard.term, hard.vote, hard.commit)  # nothing written yet


def test_the_lost_flag_travels_through_the_codec() -> None:
    message = Message(type=MessageType.APP_RESP, to=1, sender=2, term=3, reject=True, reject_hint=7, log_lost=True)
    assert decode_message(encode_message(message)).log_lost
    assert not decode_message(encode_message(Message(type=MessageType.APP_RESP, to=1, sender=2))).log_lost


def _lose_whole_log(cluster: Cluster, node_id: int) -> None:
    """Crash ``node_id`` and rebuild it empty, as the runtime does after its store was lost: in the term it had
    reached, its vote unknown, waiting for an entry of a later term (multiraft.node.scheduler.term_guard)."""
    term = cluster.node(node_id).term
    cluster.crash(node_id)
    storage = MemoryStorage()
    storage.set_hard_state(HardState(term, UNKNOWN_VOTE, 0))
    cluster.hosts[node_id] = cluster._new_host(node_id, storage, recover_until=(1, term + 1))
    cluster.down.discard(node_id)


def test_a_leader_hands_over_so_that_a_caught_up_replica_rebuilding_a_lost_log_can_vote_again() -> None:
    """Issue 23: the replica catches up in the leader's term, but only an entry of a later term ends its wait.
    Left alone it never votes again, and the group cannot elect once the leader fails (2 of 3 needed)."""
    cluster = _three_nodes_with_entries(3)
    term = cluster.node(1).term
    _lose_whole_log(cluster, 3)
    cluster.tick_all(30)  # the leader's heartbeats bring node 3 up to date; several election timeouts pass
    assert cluster.node(3).recovering_until == 0
    assert cluster.node(3).term > term
    leader = cluster.leader()
    assert leader in (1, 2)
    cluster.crash(leader)
    survivor = 3 - leader  # 1 or 2, whichever did not lead
    for _ in range(40):
        cluster.tick_all(1)
        if cluster.node(survivor).role is Role.LEADER or cluster.node(3).role is Role.LEADER:
            break
    assert Role.LEADER in (cluster.node(survivor).role, cluster.node(3).role), cluster.status_line()
