"""Thread ownership: a marked method of a bound object refuses calls from other threads (debug mode), and the
hand-offs deliver results and exceptions across the scheduler thread / event loop boundary, settling once."""

from __future__ import annotations

import asyncio
import functools
import queue
import threading
from collections.abc import Callable
from typing import Any

import pytest

from multiraft.node import threads
from multiraft.node.threads import (
    LoopHandoff,
    LoopOwned,
    SchedulerHandoff,
    SchedulerOwned,
    ThreadOwner,
    ThreadShared,
    WrongThreadError,
    on_owner_thread,
)

checks_on = pytest.mark.skipif(not threads.CHECK_THREADS, reason="thread checks are off (python -O)")


class Groups(SchedulerOwned):
    def __init__(self) -> None:
        self.owner = ThreadOwner("scheduler")
        self.items: list[int] = []

    @on_owner_thread
    def add(self, item: int) -> int:
        self.items.append(item)
        return len(self.items)

    def count(self) -> int:  # not marked: anyone may call it
        return len(self.items)


class Views(LoopOwned):
    def __init__(self) -> None:
        self.owner = ThreadOwner("event loop")

    @on_owner_thread
    def touch(self) -> str:
        return "touched"


def on_thread(action: Callable[[], Any], name: str = "other") -> Any:
    """Run ``action`` on a new thread and return its result, or the exception it raised."""
    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.append(action())
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=target, name=name)
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive()
    return outcome[0]


# -------------------------------------------------------------------------------------------- ownership


def test_before_binding_any_thread_may_call_an_owned_method() -> None:
    groups = Groups()
    assert groups.add(1) == 1
    assert on_thread(lambda: groups.add(2)) == 2


@checks_on
def test_after_binding_another_thread_calling_an_owned_method_is_refused() -> None:
    groups = Groups()
    on_thread(groups.owner.bind, name="multiraft-scheduler")

    with pytest.raises(WrongThreadError, match="scheduler thread") as raised:
        groups.add(1)

    assert "Groups.add" in str(raised.value)
    assert threading.current_thread().name in str(raised.value)
    assert groups.items == []  # the method did not run


@checks_on
def test_the_owning_thread_may_call_its_methods_after_binding() -> None:
    groups = Groups()

    def bind_then_add() -> int:
        groups.owner.bind()
        return groups.add(5)

    assert on_thread(bind_then_add) == 1
    assert groups.items == [5]


@checks_on
def test_a_thread_other_than_the_owner_is_refused_from_any_thread() -> None:
    views = Views()
    views.owner.bind()  # this thread plays the event loop
    assert views.touch() == "touched"
    refused = on_thread(views.touch, name="multiraft-scheduler")
    assert isinstance(refused, WrongThreadError)
    assert "event loop thread" in str(refused) and "multiraft-scheduler" in str(refused)


@checks_on
def test_an_unmarked_method_is_not_checked() -> None:
    groups = Groups()
    on_thread(groups.owner.bind)
    assert groups.count() == 0


def test_a_marked_method_keeps_its_name_and_docs() -> None:
    assert Groups.add.__name__ == "add"
    assert Groups.add.__qualname__.endswith("Groups.add")


def test_a_wrong_thread_is_an_assertion_failure() -> None:
    assert issubclass(WrongThreadError, AssertionError)


# ------------------------------------------------------------------------------------------- hand-offs


class ThreadSubmitter:
    """Runs submitted work in order on one worker thread, like the scheduler."""

    def __init__(self) -> None:
        self._work: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self.thread = threading.Thread(target=self._run, name="fake-scheduler")
        self.thread.start()

    def _run(self) -> None:
        while (work := self._work.get()) is not None:
            work()

    def submit(self, work: Callable[[], None]) -> None:
        self._work.put(work)

    def stop(self) -> None:
        self._work.put(None)
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()


class ImmediateSubmitter:
    """Runs submitted work at once, on the caller's thread."""

    def submit(self, work: Callable[[], None]) -> None:
        work()


def run_with_submitter(scenario: Callable[[SchedulerHandoff, ThreadSubmitter], Any]) -> tuple[Any, list[Any]]:
    """Run ``scenario`` on a fresh loop with a thread-backed submitter; returns its result and loop errors."""
    loop_errors: list[Any] = []

    async def main() -> Any:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: loop_errors.append(context))
        submitter = ThreadSubmitter()
        try:
            return await scenario(SchedulerHandoff(submitter, loop), submitter)
        finally:
            submitter.stop()

    return asyncio.run(main()), loop_errors


def test_run_delivers_the_result_of_work_done_on_the_scheduler_thread() -> None:
    async def scenario(handoff: SchedulerHandoff, submitter: ThreadSubmitter) -> Any:
        return await handoff.run(lambda: (threading.current_thread().name, 42))

    (thread_name, value), loop_errors = run_with_submitter(scenario)
    assert (thread_name, value) == ("fake-scheduler", 42)
    assert loop_errors == []


def test_run_delivers_the_exception_of_the_work_to_the_awaiting_coroutine() -> None:
    failure = KeyError("group 7")

    def work() -> None:
        raise failure

    async def scenario(handoff: SchedulerHandoff, submitter: ThreadSubmitter) -> Any:
        try:
            await handoff.run(work)
        except KeyError as exc:
            return exc
        return None

    raised, loop_errors = run_with_submitter(scenario)
    assert raised is failure
    assert loop_errors == []


def test_run_keeps_the_order_of_submitted_work() -> None:
    async def scenario(handoff: SchedulerHandoff, submitter: ThreadSubmitter) -> Any:
        done: list[int] = []

        def work(i: int) -> int:
            done.append(i)
            return i

        futures = [handoff.run(functools.partial(work, i)) for i in range(20)]
        return await asyncio.gather(*futures), done

    (results, done), _ = run_with_submitter(scenario)
    assert results == list(range(20)) and done == list(range(20))


def test_work_whose_awaiting_coroutine_gave_up_settles_nothing_and_raises_nothing() -> None:
    async def scenario(handoff: SchedulerHandoff, submitter: ThreadSubmitter) -> Any:
        gate = threading.Event()
        future = handoff.run(lambda: gate.wait(10) and "late")
        future.cancel()
        gate.set()
        return await handoff.run(lambda: "after"), future.cancelled()

    (after, cancelled), loop_errors = run_with_submitter(scenario)
    assert (after, cancelled) == ("after", True)
    assert loop_errors == []  # no InvalidStateError from settling a cancelled future


def test_run_works_with_a_submitter_that_runs_work_at_once() -> None:
    async def main() -> Any:
        handoff = SchedulerHandoff(ImmediateSubmitter(), asyncio.get_running_loop())
        return await handoff.run(lambda: "now")

    assert asyncio.run(main()) == "now"


def test_submit_hands_work_to_the_submitter_unchanged() -> None:
    submitted: list[Callable[[], None]] = []

    class Recording:
        def submit(self, work: Callable[[], None]) -> None:
            submitted.append(work)

    def work() -> None:
        pass

    async def main() -> None:
        SchedulerHandoff(Recording(), asyncio.get_running_loop()).submit(work)

    asyncio.run(main())
    assert submitted == [work]


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        ((1, None), (2, None), 1),
        ((1, None), (None, RuntimeError("late")), 1),
        ((None, KeyError("first")), (2, None), KeyError),
    ],
    ids=["result then result", "result then error", "error then result"],
)
def test_a_completion_settles_its_future_once_and_ignores_a_second_call(
    first: tuple[Any, BaseException | None], second: tuple[Any, BaseException | None], expected: Any
) -> None:
    async def scenario(handoff: SchedulerHandoff, submitter: ThreadSubmitter) -> Any:
        future, complete = handoff.completion()

        def on_scheduler() -> None:
            complete(*first)
            complete(*second)

        submitter.submit(on_scheduler)
        try:
            return await future
        except KeyError as exc:
            return exc

    outcome, loop_errors = run_with_submitter(scenario)
    if expected is KeyError:
        assert isinstance(outcome, KeyError) and outcome.args == ("first",)
    else:
        assert outcome == expected
    assert loop_errors == []


def test_a_completion_called_after_its_future_was_cancelled_is_ignored() -> None:
    async def scenario(handoff: SchedulerHandoff, submitter: ThreadSubmitter) -> Any:
        loop = asyncio.get_running_loop()
        future, complete = handoff.completion()
        future.cancel()
        done = asyncio.Event()

        def then_signal() -> None:  # queued on the loop after the completion's settle
            loop.call_soon_threadsafe(done.set)

        submitter.submit(lambda: complete("too late", None))
        submitter.submit(then_signal)
        await done.wait()
        return future.cancelled()

    cancelled, loop_errors = run_with_submitter(scenario)
    assert cancelled
    assert loop_errors == []


def test_loop_handoff_runs_a_posted_action_on_the_loop_thread() -> None:
    async def main() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        ran_on = loop.create_future()
        post = LoopHandoff(loop).post
        on_thread(lambda: post(lambda: ran_on.set_result(threading.get_ident())))
        return await ran_on, threading.get_ident()

    ran_on, loop_thread = asyncio.run(main())
    assert ran_on == loop_thread


# Private records of an owned object, reached only through it (their owner's thread is theirs).
_HELD_BY_AN_OWNER = {
    "multiraft.node.replicas.consumer_group_host._Step",
    "multiraft.node.replicas.consumer_group_host._GroupSlot",
    "multiraft.node.replicas.producers._Producer",
    "multiraft.node.replicas.raft_group._Pending",
    "multiraft.node.scheduler.reads._Read",
    "multiraft.node.scheduler.scrubber.ScrubStats",
    "multiraft.node.cluster.directory._LeaderCache",
    "multiraft.node.cluster.rebalancer.MoveProgress",
    "multiraft.node.catchup._follower._Job",
}
# Holders of constants, no state at all (plain classes rather than enums: read on the transport's hot path).
_CONSTANTS = {"multiraft.node.peer.frames.FrameType", "multiraft.node.peer.link.DirectOutcome"}


def _classes_with_state(package: str) -> list[type]:
    """The classes defined in ``package``'s modules that may hold mutable state: not protocols, enums,
    exceptions, named tuples or frozen dataclasses."""
    import enum
    import importlib
    import inspect
    import pkgutil
    from typing import Protocol

    found: list[type] = []
    root = importlib.import_module(package)
    for info in pkgutil.iter_modules(root.__path__, f"{package}."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__ or Protocol in cls.__mro__[1:] or getattr(cls, "_is_protocol", False):
                continue
            if issubclass(cls, enum.Enum | BaseException | tuple):
                continue
            params = getattr(cls, "__dataclass_params__", None)
            if params is not None and params.frozen:
                continue
            found.append(cls)
    return found


@pytest.mark.parametrize(
    "package",
    [f"multiraft.node.{room}" for room in ("scheduler", "replicas", "peer", "catchup", "cluster", "services")],
)
def test_every_class_with_state_in_the_node_rooms_names_its_owning_thread_in_its_type(package: str) -> None:
    unmarked = [
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in _classes_with_state(package)
        if not issubclass(cls, SchedulerOwned | LoopOwned | ThreadShared)
        and f"{cls.__module__}.{cls.__qualname__}" not in _HELD_BY_AN_OWNER | _CONSTANTS
    ]
    assert unmarked == []
