"""The seeded simulation's client: what it asks of the cluster, and what it saw acknowledged."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from multiraft.raft import (
    ConfChange,
    ConfChangePending,
    ConfChangeSingle,
    ConfChangeType,
    Entry,
    InvalidConfChangeError,
    InvalidRequestError,
    NotLeader,
    ProposalDropped,
)

from .harness import ReplicaHost

if TYPE_CHECKING:
    from .simulation import Simulation

__all__ = ["SimClient"]

MAX_NODE_ID = 7


@dataclass
class _Proposal:
    node: int
    incarnation: int
    index: int
    term: int
    payload: bytes


class SimClient:
    """Proposals, configuration changes, leadership transfers and linearizable reads, drawn from the simulation's
    generator in the simulation's order (one seed, one schedule); the writes it saw acknowledged (``acked``) and
    the reads it awaits, each checked against what was committed when it was requested."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.proposals: dict[tuple[int, int], _Proposal] = {}
        self.removed: set[int] = set()  # nodes whose removal was proposed (until one is placed back)
        self.acked: dict[int, bytes] = {}
        self.reads: dict[bytes, int] = {}
        self.next_payload = 0

    def act(self, leader: ReplicaHost) -> None:
        sim = self.sim
        p = sim.params
        rng = sim.rng
        node = leader.node
        if rng.random() < p.propose:
            for _ in range(rng.choice((1, 1, 2, 5))):
                self.next_payload += 1
                payload = sim.make_payload(f"s{sim.seed}-p{self.next_payload}".encode())
                try:
                    index = node.propose(payload)
                except (NotLeader, ProposalDropped):
                    break
                self.proposals[(leader.id, index)] = _Proposal(
                    leader.id, sim.incarnation[leader.id], index, node.term, payload
                )
                sim.after_step(leader)
        if p.conf_change and rng.random() < p.conf_change:
            self.change_configuration(leader)
        if p.transfer and rng.random() < p.transfer:
            voters = sorted(node.conf_state.voters)
            try:
                node.transfer_leader(rng.choice(voters))
            except (InvalidRequestError, NotLeader):
                pass
            sim.note(f"transfer requested on {leader.id}")
            sim.stats["transfers"] += 1
        if p.read and rng.random() < p.read:
            reader = rng.choice(sorted(sim.up))
            context = f"r{sim.net.seq}-{sim.now}-{reader}".encode()
            sim.net.seq += 1
            try:
                sim.hosts[reader].node.read_index(context)
            except NotLeader:
                return
            self.reads[context] = sim.checker.max_committed

    def change_configuration(self, leader: ReplicaHost) -> None:
        sim = self.sim
        rng = sim.rng
        conf = leader.node.conf_state
        if conf.joint:
            return
        voters, learners = list(conf.voters), list(conf.learners)
        if self._place_back(leader):
            return
        new_ids = [i for i in range(1, MAX_NODE_ID + 1) if i not in sim.hosts]
        options: list[tuple[str, ConfChange]] = []
        if new_ids:
            options.append(("add learner", ConfChange.add_learner(new_ids[0])))
        if learners:
            options.append(("promote", ConfChange.add_voter(rng.choice(learners))))
            options.append(("remove learner", ConfChange.remove_node(rng.choice(learners))))
        sim.lost_disks = {i for i in sim.lost_disks if i not in sim.up or sim.hosts[i].node.recovering_until}
        # A group of two voters, one of them rebuilding a lost disk, cannot elect: that one never knows whether
        # the other holds what it lost (docs/reliability.md). The operator shrinks such a group no further.
        if len(voters) > (3 if sim.lost_disks else 1):
            options.append(("remove voter", ConfChange.remove_node(rng.choice(voters))))
            options.append(("demote", ConfChange.add_learner(rng.choice(voters))))
        if len(voters) < 3 and new_ids:
            options.append(("add voter", ConfChange.add_voter(new_ids[0])))
        if learners and voters:
            out, into = rng.choice(voters), rng.choice(learners)
            options.append(
                (
                    "replace",
                    ConfChange(
                        (
                            ConfChangeSingle(ConfChangeType.REMOVE_NODE, out),
                            ConfChangeSingle(ConfChangeType.ADD_VOTER, into),
                        )
                    ),
                )
            )
        if not options:
            return
        what, change = rng.choice(options)
        try:
            leader.node.propose_conf_change(change)
        except (ConfChangePending, InvalidConfChangeError, ProposalDropped, NotLeader):
            return
        sim.note(f"conf change {what}: {change}")
        self.removed.update(c.node_id for c in change.changes if c.type is ConfChangeType.REMOVE_NODE)
        sim.stats[f"conf change {what}"] += 1
        for single in change.changes:
            if single.node_id not in sim.hosts:
                sim.add_node(single.node_id)

    def _place_back(self, leader: ReplicaHost) -> bool:
        """Now and then (its own generator, so the other draws stay as they were) add a removed node back as a
        learner, as an undrain or a move back does: its node gave the old replica up and starts a new one on an
        empty disk (see Simulation.place_back)."""
        sim = self.sim
        members = leader.node.conf_state.members()
        back = sorted(i for i in self.removed if i not in members and i in sim.hosts)
        if not back or sim.place_back_rng.random() >= 0.3:
            return False
        node_id = sim.place_back_rng.choice(back)
        try:
            leader.node.propose_conf_change(ConfChange.add_learner(node_id))
        except (ConfChangePending, InvalidConfChangeError, ProposalDropped, NotLeader):
            return True
        sim.note(f"conf change place back {node_id}")
        sim.stats["conf change place back"] += 1
        self.removed.discard(node_id)
        sim.place_back(node_id)
        return True

    def on_apply(self, host: ReplicaHost, entry: Entry) -> None:
        """A write counts as acknowledged when the node it was proposed to applies it, in the same incarnation."""
        proposal = self.proposals.pop((host.id, entry.index), None)
        if proposal is not None and proposal.incarnation == self.sim.incarnation[host.id]:
            if entry.term == proposal.term:
                if bytes(entry.payload) != proposal.payload:
                    self.sim.checker.fail(f"node {host.id} applied ({entry.index}, {entry.term}) with another payload")
                self.acked[entry.index] = proposal.payload

    def check_reads(self) -> None:
        sim = self.sim
        for host_id in sorted(sim.up):
            host = sim.hosts[host_id]
            while host.read_states:
                index, context = host.read_states.pop()
                floor = self.reads.pop(context, None)
                sim.stats["reads served"] += 1
                if floor is not None and index < floor:
                    sim.checker.fail(f"read {context!r} on {host_id} got index {index} < committed {floor}")
