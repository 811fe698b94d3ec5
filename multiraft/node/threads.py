"""Which thread owns an object, in its type: the scheduler thread or the event loop.

A node runs two threads of its own. The scheduler thread owns the log store and every Raft group
(:class:`~multiraft.node.scheduler.store.Store`); the asyncio event loop owns the network, the services and the loop's
view of the cluster (:class:`~multiraft.node.cluster.directory.Directory`). A class says which one it belongs to by
deriving from :class:`SchedulerOwned` or :class:`LoopOwned`, and its methods that must run there are marked
:func:`on_owner_thread`. In debug mode (the default; ``python -O`` or ``MULTIRAFT_CHECK_THREADS=0`` turns it
off) a call from another thread raises :class:`WrongThreadError` at once, instead of racing silently.
Every class of the node's rooms that holds mutable state derives from one of them, or from
:class:`ThreadShared` for the few both threads use (``tests/node/test_threads.py`` checks it); a dataclass takes
its ``owner`` as a field, and a part built
inside its owner takes the owner's. An owner checks nothing until its thread binds it, so unit tests build and
drive these objects on the test thread.

The loop reaches scheduler-owned objects only through :class:`SchedulerHandoff` (submit, or submit and
await); the scheduler reaches loop-owned objects only through :meth:`LoopHandoff.post`. One exception, built
for it: the peer transport's ``post`` takes its connections' locks and writes Raft frames from the scheduler
thread (:mod:`multiraft.node.peer.link`).
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

__all__ = [
    "CHECK_THREADS",
    "WrongThreadError",
    "ThreadOwner",
    "SchedulerOwned",
    "LoopOwned",
    "ThreadShared",
    "on_owner_thread",
    "SchedulerHandoff",
    "LoopHandoff",
    "Submitter",
]

CHECK_THREADS = __debug__ and os.environ.get("MULTIRAFT_CHECK_THREADS", "1") != "0"

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class WrongThreadError(AssertionError):
    """A thread-owned method was called from another thread (a bug, caught in debug mode)."""


class ThreadOwner:
    """The thread an object belongs to, known once that thread binds it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._ident: int | None = None

    def bind(self) -> None:
        """Called on the owning thread: from now on only it may call owned methods."""
        self._ident = threading.get_ident()

    def check(self, what: str) -> None:
        if CHECK_THREADS and self._ident is not None and threading.get_ident() != self._ident:
            raise WrongThreadError(
                f"{what} belongs to the {self.name} thread but was called on {threading.current_thread().name!r}"
            )


class _Owned:
    owner: ThreadOwner


class SchedulerOwned(_Owned):
    """Base of objects that live on the scheduler thread (the log store, the Raft groups)."""


class LoopOwned(_Owned):
    """Base of objects that live on the node's asyncio event loop (network, services, the loop's views)."""

    # Unbound, so it checks nothing: a class whose methods are checked sets its own (the Directory's).
    owner = ThreadOwner("event loop")


class ThreadShared:
    """Base of the few objects both threads use; each says in its docstring how they share it (behind its own
    lock, fields split by thread, or values replaced whole, never changed in place)."""


OwnedT = TypeVar("OwnedT", bound=_Owned)


def on_owner_thread(method: Callable[Concatenate[OwnedT, P], R]) -> Callable[Concatenate[OwnedT, P], R]:
    """Mark a method that must run on its object's owning thread (checked in debug mode)."""
    if not CHECK_THREADS:
        return method
    what = method.__qualname__

    def checked(self: OwnedT, /, *args: P.args, **kwargs: P.kwargs) -> R:
        self.owner.check(what)
        return method(self, *args, **kwargs)

    functools.update_wrapper(checked, method)
    return checked


class Submitter(Protocol):
    """What runs work on the scheduler thread (the scheduler itself)."""

    def submit(self, work: Callable[[], None]) -> None: ...


class SchedulerHandoff:
    """The one way from the event loop to the scheduler thread: run work there, or run it and await it."""

    def __init__(self, submitter: Submitter, loop: asyncio.AbstractEventLoop) -> None:
        self._submitter = submitter
        self._loop = loop

    def submit(self, work: Callable[[], None]) -> None:
        self._submitter.submit(work)

    def run(self, work: Callable[[], T]) -> asyncio.Future[T]:
        """Run ``work`` on the scheduler thread; the future (on the loop) gets its result or exception."""
        future, complete = self.completion()

        def run() -> None:
            try:
                result = work()
            except BaseException as exc:  # handed back to the awaiting coroutine, which decides
                complete(None, exc)
                return
            complete(result, None)

        self._submitter.submit(run)
        return future

    def completion(self) -> tuple[asyncio.Future[Any], Callable[[Any, BaseException | None], None]]:
        """A future on the loop and the completion (called on the scheduler thread) that settles it."""
        future: asyncio.Future[Any] = self._loop.create_future()
        loop = self._loop

        def settle(result: Any, error: BaseException | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

        def complete(result: Any, error: BaseException | None) -> None:
            loop.call_soon_threadsafe(settle, result, error)

        return future, complete


class LoopHandoff:
    """The one way from the scheduler thread to the event loop: post a callback to run there."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def post(self, action: Callable[[], None]) -> None:
        self._loop.call_soon_threadsafe(action)
