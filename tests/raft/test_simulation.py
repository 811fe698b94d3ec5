"""Deterministic simulation: thousands of seeded random schedules, Raft's safety checked after every step.

Replay one seed exactly (with the event trace on stderr)::

    RAFT_SIM_SEED=1234 RAFT_SIM_TRACE=1 .venv/bin/python -m pytest \
        tests/raft/test_simulation.py::test_replay_one_seed -s

or by its test id: ``pytest 'tests/raft/test_simulation.py::test_random_schedule_is_safe_and_live[seed-1234]'``.
The 100,000-schedule run is marked slow: ``pytest tests/raft/test_simulation.py -m slow -n 2``.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections import Counter

import pytest

from multiraft.raft import EntryKind, Message, RawNode, Ready, _raft

from .simulation import Simulation, run_seed

CI_SEEDS = 1000
SLOW_SEEDS = 100_000
SLOW_CHUNK = 1000

_exercised: Counter[str] = Counter()
_seconds = [0.0]  # CPU time of the seeded schedules in this process (reported, never asserted)


@pytest.mark.parametrize("seed", range(CI_SEEDS), ids=lambda seed: f"seed-{seed}")
def test_random_schedule_is_safe_and_live(seed: int) -> None:
    started = time.process_time()
    result = run_seed(seed)
    _seconds[0] += time.process_time() - started
    _exercised.update(result.stats)


def test_the_random_schedules_exercise_every_fault_and_feature(capsys: pytest.CaptureFixture[str]) -> None:
    if _exercised["schedules"] < CI_SEEDS:
        pytest.skip("needs the full seeded run of this module")
    with capsys.disabled():
        print(
            f"\n[raft simulation] {_exercised['schedules']} schedules, {_exercised['leaders elected']} elections, "
            f"{_exercised['acknowledged writes']} acknowledged writes: {_seconds[0]:.1f} s of CPU"
        )
    for what in (
        "crashes",
        "restarts delaying their election",
        "restarts campaigning at once",
        "crashes losing an unsynced ready",
        "crashes losing unsynced writes",
        "messages dropped",
        "duplicates delivered",
        "messages delivered out of order",
        "messages delivered late",
        "heals",
        "partitions",
        "snapshots installed",
        "conf change add learner",
        "conf change promote",
        "conf change remove voter",
        "conf change replace",
        "conf change demote",
        "conf change place back",
        "placed back released",
        "transfers",
        "reads served",
        "messages through the codec",
        "quiesce heartbeats",
        "crashes losing a durable suffix",
        "crashes losing committed entries",
    ):
        assert _exercised[what] > 10, f"{what}: {_exercised[what]}"
    assert _exercised["leaders elected"] > CI_SEEDS
    assert _exercised["acknowledged writes"] > 50 * CI_SEEDS


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(SLOW_SEEDS // SLOW_CHUNK), ids=lambda c: f"seeds-{CI_SEEDS + c * SLOW_CHUNK}")
def test_100k_random_schedules_are_safe_and_live(chunk: int) -> None:
    first = CI_SEEDS + chunk * SLOW_CHUNK
    for seed in range(first, first + SLOW_CHUNK):
        run_seed(seed)


def test_replay_one_seed() -> None:
    seed = os.environ.get("RAFT_SIM_SEED")
    if seed is None:
        pytest.skip("set RAFT_SIM_SEED=<seed> to replay one schedule")
    result = run_seed(int(seed))
    print(f"seed {seed}: {result}")


def test_a_seed_replays_exactly() -> None:
    def run(seed: int) -> tuple[list[str], object]:
        sim = Simulation(seed, trace=True)
        sim.trace = type(sim.trace)(maxlen=None)
        result = sim.run()
        return list(sim.trace), (result.committed, result.acked, result.steps, result.liveness_ticks)

    for seed in (3, 11, 42):
        assert run(seed) == run(seed)


# The checker is only as good as the bugs it finds: break the core on purpose and expect a failing seed.
# (Committing old-term entries by counting replicas needs the precise Figure 8 interleaving, which random
# schedules almost never produce; test_replication.py's Figure 8 scenario covers it.)


def _failing_seed(seeds: range) -> int | None:
    for seed in seeds:
        try:
            Simulation(seed).run()
        except AssertionError:
            return seed
    return None


def test_the_checker_catches_a_core_that_votes_twice_in_a_term(monkeypatch: pytest.MonkeyPatch) -> None:
    original = _raft.Raft._handle_vote_request

    def vote_for_anyone(self: _raft.Raft, m: Message) -> None:
        self.vote = 0  # forget the vote: grant every up-to-date candidate
        original(self, m)

    monkeypatch.setattr(_raft.Raft, "_handle_vote_request", vote_for_anyone)
    assert _failing_seed(range(200)) is not None


def test_the_checker_catches_a_leader_that_counts_its_copy_before_persisting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = _raft.Raft._append

    def count_at_once(self: _raft.Raft, kind: EntryKind, payload: bytes | memoryview, ts: int) -> int:
        index = original(self, kind, payload, ts)
        pr = self.tracker.progress.get(self.id)
        if pr is not None:
            pr.maybe_update(index)
            self._maybe_commit()
        return index

    monkeypatch.setattr(_raft.Raft, "_append", count_at_once)
    # Seeds 219, 425, 463 and 496 expose it today (a crash loses the leader's unsynced entry after it was
    # counted); a change to the schedule generator moves them: search again and move this window.
    seeds = range(200, 240)
    assert _failing_seed(seeds) is not None, f"no seed in {seeds} exposes the mutant any more"


def test_the_checker_catches_a_core_that_lets_new_entries_and_votes_go_unsynced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = RawNode.ready

    def never_sync(self: RawNode) -> Ready:
        ready = dataclasses.replace(original(self), must_sync=False)
        self._outstanding = ready  # advance() wants the Ready it handed out
        return ready

    monkeypatch.setattr(RawNode, "ready", never_sync)
    # A crash now loses acknowledged entries and votes: seeds 6, 11 and 22 expose it today.
    assert _failing_seed(range(40)) is not None


def test_the_checker_catches_a_replica_that_votes_and_campaigns_with_the_entries_it_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The lost entries still come back from the leader, but the replica votes and stands as if it held them.
    original = _raft.Raft.hup

    def campaign_anyway(self: _raft.Raft, *, transfer: bool = False) -> None:
        saved = self.recover_until
        if self._recovering():
            self._announce_lost_entries()
        self.recover_until = (0, 0)
        try:
            original(self, transfer=transfer)
        finally:
            self.recover_until = saved

    monkeypatch.setattr(_raft.Raft, "_holds_what_we_lost", lambda self, m: True)
    monkeypatch.setattr(_raft.Raft, "hup", campaign_anyway)
    failures = []
    for seed in range(880, 960):
        try:
            Simulation(seed, lose_suffix=1.0).run()
        except AssertionError as exc:
            failures.append(str(exc))
    assert any("leader completeness" in failure or "lost" in failure for failure in failures), failures


def test_replicas_that_lose_committed_entries_at_crashes_stay_safe_and_live() -> None:
    # The same seeds as above, with the rule on.
    lost = 0
    for seed in range(880, 960):
        result = Simulation(seed, lose_suffix=1.0).run()
        lost += result.stats["crashes losing committed entries"]
    assert lost > 5


def _disk_losses(simulation: type[Simulation], seeds: range) -> tuple[int, list[str]]:
    """(crashes that lost a whole disk, failures) over ``seeds`` with a disk lost at every allowed crash."""
    lost, failures = 0, []
    for seed in seeds:
        try:
            lost += simulation(seed, lose_suffix=0.0, lose_disk=1.0).run().stats["crashes losing the whole disk"]
        except AssertionError as exc:
            failures.append(str(exc))
    return lost, failures


def test_replicas_that_lose_their_whole_disk_at_crashes_stay_safe_and_live() -> None:
    lost, failures = _disk_losses(Simulation, range(1000, 1060))
    assert failures == [] and lost > 20


def test_the_checker_catches_a_replica_rebuilt_from_an_empty_disk_without_its_recorded_term() -> None:
    # As before the recorded terms: the rebuilt replica starts as a fresh initial member and votes at once, perhaps
    # twice in a term, and for logs lacking entries committed with its acknowledgement.
    class Forgetful(Simulation):
        def _replace_disk(self, node_id: int) -> None:
            super()._replace_disk(node_id)
            self.disks[node_id] = self.new_disk(node_id, self.initial_conf)
            del self.recover_until[node_id]

    _, failures = _disk_losses(Forgetful, range(1060, 1110))
    assert any("leader completeness" in failure for failure in failures), failures
