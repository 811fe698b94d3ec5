"""The asyncio runtime: runs a :class:`SwimCore` on the event loop's clock over a :class:`Transport`.

The runtime owns no protocol logic. It feeds the core every datagram and push-pull it receives, wakes it at
its next deadline with ``loop.call_at`` (no polling), sends what it asks for, and hands its events to
subscribers. Nothing a peer sends can raise out of the runtime: bad input is counted and dropped.

With a :class:`Keyring` the runtime seals every datagram and push-pull message it sends and opens every one it
receives (:mod:`membership._crypto`); what no key opens is counted and dropped before the core sees it, so the
core stays the same with and without encryption.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import random
from collections.abc import Callable, Coroutine, Iterable
from types import TracebackType
from typing import Any

import structlog

from membership._crypto import SEAL_OVERHEAD, Keyring
from membership._state import SwimCore
from membership._transport import NetTransport, Transport
from membership._types import Counters, EventKind, Member, MemberEvent, MemberMeta
from membership.config import MembershipConfig
from membership.errors import (
    JoinError,
    LifecycleError,
    MembershipCodecError,
    MetadataError,
    TransportError,
    UndecryptableError,
)

__all__ = ["MemberList"]

# A stdlib logger underneath: unconfigured, info stays silent and warnings go to stderr, never stdout.
_log: structlog.stdlib.BoundLogger = structlog.wrap_logger(logging.getLogger(__name__))
_INFINITY = float("inf")
# Undecryptable input is logged at most this often (with the count since the last warning): a flood of
# forged packets must not flood the log too.
_UNDECRYPTABLE_LOG_INTERVAL = 10.0
_PLAIN_MAGICS = (0x53, 0x50)  # the first byte of a plain packet ('S') and push-pull state ('P')


class _Phase(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    STOPPED = "stopped"


class MemberList:
    """A node's SWIM member-list on asyncio: ``start()``, ``join(seeds)``, watch events, ``leave()``, ``stop()``.

    ::

        members = MemberList(MemberMeta(1, "127.0.0.1:9092", "127.0.0.1:9093"), MembershipConfig.local())
        await members.start()                 # binds UDP+TCP; members.gossip_addr is the bound host:port
        events = members.event_queue()        # or members.subscribe(callback)
        await members.join(["127.0.0.1:7946"])
        ...
        await members.leave()                 # tell the cluster, then
        await members.stop()
    """

    def __init__(
        self,
        meta: MemberMeta,
        config: MembershipConfig | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        advertise_host: str | None = None,
        transport: Transport | None = None,
        rng: random.Random | None = None,
        keyring: Keyring | None = None,
    ) -> None:
        self._config = config if config is not None else MembershipConfig.lan()
        self._meta = meta
        self._counters = Counters()
        self._transport: Transport = (
            transport
            if transport is not None
            else NetTransport(
                host,
                port,
                advertise_host=advertise_host,
                stream_timeout=self._config.tcp_timeout,
                max_stream_bytes=self._config.max_push_pull_bytes + SEAL_OVERHEAD,
                counters=self._counters,
            )
        )
        self._rng = rng if rng is not None else random.Random()
        self._keyring = keyring
        self._associated = self._config.cluster_name.encode()
        self._undecryptable_logged_at = -_INFINITY
        self._undecryptable_unlogged = 0
        self._core: SwimCore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._phase = _Phase.NEW
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = _INFINITY
        self._tasks: set[asyncio.Task[Any]] = set()
        self._callbacks: list[Callable[[MemberEvent], object]] = []
        self._queues: list[asyncio.Queue[MemberEvent]] = []
        self._leave_done: asyncio.Event | None = None
        self._log = _log.bind(node_id=meta.node_id)
        # Test hook for network cuts: (peer gossip address, outgoing) -> drop that datagram or push-pull.
        self.drop_packet: Callable[[str, bool], bool] | None = None

    # Lifecycle

    async def start(self) -> None:
        """Bind the sockets and start probing. The member knows only itself until :meth:`join`."""
        if self._phase is not _Phase.NEW:
            raise LifecycleError(f"start() on a member-list that is {self._phase.value}")
        self._loop = asyncio.get_running_loop()
        addr = await self._transport.start(self._on_packet, self._on_stream)
        self._core = SwimCore(
            self._config, self._meta, addr, rng=self._rng, now=self._loop.time(), counters=self._counters
        )
        self._phase = _Phase.RUNNING
        self._log.info("membership started", gossip_addr=addr)
        self._pump()

    async def join(self, seeds: Iterable[str]) -> int:
        """Push-pull full state with each seed (``host:port``) at once; return how many answered.

        Raises :class:`JoinError` if seeds were given and none answered. Our own address is skipped, so
        every node of a cluster can be given the same seed list.
        """
        core = self._running_core()
        if core.has_left:
            raise LifecycleError("join() after leave()")
        targets = [seed for seed in dict.fromkeys(seeds) if seed != core.local_member.gossip_addr]
        if not targets:
            return 0
        results = await asyncio.gather(*(self._push_pull(seed, join=True) for seed in targets), return_exceptions=True)
        failures = {seed: str(result) for seed, result in zip(targets, results, strict=True) if result is not None}
        joined = len(targets) - len(failures)
        if joined == 0:
            raise JoinError(failures)
        self._log.info("joined", seeds_answered=joined, members=core.num_members)
        return joined

    async def leave(self, timeout: float | None = None) -> bool:
        """Tell the cluster we are leaving and wait until the news is out (at most ``leave_timeout``).

        Returns False if the wait timed out. The member still answers probes until :meth:`stop`.
        """
        core = self._running_core()
        loop = self._event_loop()
        if not core.has_left:
            core.leave(loop.time())
            self._leave_done = asyncio.Event()
            self._pump()
        if core.leave_propagated:
            return True
        done = self._leave_done
        if done is None:  # left through another path (cannot happen through this class)
            return core.leave_propagated
        wait = timeout if timeout is not None else self._config.leave_timeout
        try:
            await asyncio.wait_for(done.wait(), wait)
        except TimeoutError:
            self._log.warning("leave not fully gossiped before the timeout", members=core.num_members)
            return False
        self._log.info("left")
        return True

    async def stop(self) -> None:
        """Close the sockets and stop all work. Without :meth:`leave`, peers will see this as a failure."""
        if self._phase is _Phase.STOPPED:
            return
        was_running = self._phase is _Phase.RUNNING
        self._phase = _Phase.STOPPED
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if was_running:
            await self._transport.close()
            self._log.info("membership stopped")

    async def __aenter__(self) -> MemberList:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    # Reading

    @property
    def config(self) -> MembershipConfig:
        return self._config

    @property
    def running(self) -> bool:
        return self._phase is _Phase.RUNNING

    @property
    def local_member(self) -> Member:
        return self._started_core().local_member

    @property
    def gossip_addr(self) -> str:
        """The bound and advertised ``host:port`` (UDP and TCP)."""
        return self._started_core().local_member.gossip_addr

    @property
    def port(self) -> int:
        return int(self.gossip_addr.rpartition(":")[2])

    def members(self) -> list[Member]:
        """Alive and suspect members, this one included, by node id."""
        return self._started_core().members()

    def all_members(self) -> list[Member]:
        """Every member still remembered, dead and left ones included."""
        return self._started_core().all_members()

    def member(self, node_id: int) -> Member | None:
        return self._started_core().member(node_id)

    @property
    def num_members(self) -> int:
        return self._started_core().num_members

    @property
    def health_score(self) -> int:
        """Lifeguard local health: 0 is healthy; higher means this node stretches its probe interval."""
        return self._started_core().health_score

    def counters(self) -> dict[str, int]:
        """Every counter by name (packets, bytes, probes, suspicions, drops...), for metrics."""
        return self._counters.snapshot()

    @property
    def keyring(self) -> Keyring | None:
        """The gossip keyring; None when gossip travels in plain text (tagged with the cluster name only)."""
        return self._keyring

    def set_keyring(self, keyring: Keyring) -> None:
        """Use another keyring from now on (rotation): its primary seals what is sent, all its keys open."""
        old = self._keyring
        self._keyring = keyring
        self._log.info(
            "gossip keyring changed",
            keys=keyring.fingerprints(),
            previous=old.fingerprints() if old is not None else None,
        )

    # Changing

    def update_meta(self, **changes: Any) -> MemberMeta:
        """Change this member's metadata (not ``node_id``) and gossip it under a bumped incarnation."""
        if "node_id" in changes and changes["node_id"] != self._meta.node_id:
            raise MetadataError("node_id", "cannot change while running")
        try:
            meta = dataclasses.replace(self._meta, **changes)
        except TypeError as exc:
            raise MetadataError(", ".join(sorted(changes)), f"not a MemberMeta field: {exc}") from exc
        if self._core is not None:
            if self._phase is not _Phase.RUNNING:
                raise LifecycleError("update_meta() after stop()")
            self._core.update_meta(self._event_loop().time(), meta)
            self._pump()
        self._meta = meta
        return meta

    # Events

    def subscribe(self, callback: Callable[[MemberEvent], object]) -> Callable[[], None]:
        """Call ``callback(event)`` on the event loop for every event; returns a function that unsubscribes.

        Callbacks must not block; exceptions they raise are logged and counted.
        """
        self._callbacks.append(callback)

        def unsubscribe() -> None:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

        return unsubscribe

    def event_queue(self, maxsize: int = 0) -> asyncio.Queue[MemberEvent]:
        """A new queue that receives every event from now on; when full, new events are dropped and counted."""
        queue: asyncio.Queue[MemberEvent] = asyncio.Queue(maxsize)
        self._queues.append(queue)
        return queue

    def close_event_queue(self, queue: asyncio.Queue[MemberEvent]) -> None:
        if queue in self._queues:
            self._queues.remove(queue)

    # Driving the core

    def _on_packet(self, src_addr: str, data: bytes) -> None:
        core = self._core
        if core is None or self._phase is not _Phase.RUNNING:
            return
        if self.drop_packet is not None and self.drop_packet(src_addr, False):
            return
        if self._keyring is not None:
            if len(data) > self._config.max_packet_bytes + SEAL_OVERHEAD:
                self._counters.malformed_dropped += 1
                return
            opened = self._unseal(data, f"datagram from {src_addr}")
            if opened is None:
                return
            data = opened
        try:
            core.receive(self._event_loop().time(), src_addr, data)
        except Exception:
            # The core drops bad input itself; reaching here is a bug, which must not stop the member.
            self._counters.malformed_dropped += 1
            self._log.exception("packet handler failed", src=src_addr, size=len(data))
        self._pump()

    def _on_stream(self, data: bytes) -> bytes | None:
        core = self._core
        if core is None or self._phase is not _Phase.RUNNING:
            return None
        opened = self._unseal(data, "push-pull request")
        if opened is None:
            return None
        try:
            reply = core.handle_push_pull_request(self._event_loop().time(), opened)
            return self._seal(reply) if reply is not None else None
        except MembershipCodecError as exc:
            self._counters.push_pull_failures += 1
            self._log.warning("cannot serve push-pull", error=str(exc))
            return None
        except Exception:
            self._counters.malformed_dropped += 1
            self._log.exception("push-pull handler failed", size=len(data))
            return None
        finally:
            self._pump()

    async def _push_pull(self, addr: str, *, join: bool) -> None:
        core = self._running_core()
        try:
            request = core.push_pull_request(join=join)
            self._pump()
            if self.drop_packet and self.drop_packet(addr, True):
                raise TransportError(f"push-pull to {addr} cut (test hook)")
            sealed_reply = await self._transport.exchange(addr, self._seal(request), self._config.tcp_timeout)
        except (TransportError, MembershipCodecError) as exc:
            self._counters.push_pull_failures += 1
            self._log.debug("push-pull failed", peer=addr, error=str(exc))
            if join:
                raise
            return
        if self._phase is not _Phase.RUNNING:
            return
        reply = self._unseal(sealed_reply, f"push-pull reply from {addr}")
        if reply is None:
            self._counters.push_pull_failures += 1
            if join:
                raise TransportError(f"{addr} sent a push-pull reply no key of the gossip keyring opens")
            return
        accepted = core.handle_push_pull_response(self._event_loop().time(), reply, addr)
        self._pump()
        if not accepted:
            self._counters.push_pull_failures += 1
            if join:
                raise TransportError(f"{addr} sent a state that was refused (malformed or another cluster)")

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = _INFINITY
        core = self._core
        if core is None or self._phase is not _Phase.RUNNING:
            return
        try:
            core.tick(self._event_loop().time())
        except Exception:
            self._log.exception("protocol timer failed")
        self._pump()

    def _pump(self) -> None:
        """Send what the core asked for, deliver its events, and wake it at its next deadline."""
        core = self._core
        if core is None or self._phase is not _Phase.RUNNING:
            return
        for addr, data in core.take_packets():
            if not (self.drop_packet and self.drop_packet(addr, True)):
                self._transport.send_packet(addr, self._seal(data))
        for addr in core.take_push_pulls():
            self._spawn(self._push_pull(addr, join=False))
        for event in core.take_events():
            self._deliver(event)
        if self._leave_done is not None and core.leave_propagated:
            self._leave_done.set()
        deadline = core.next_deadline()
        if deadline < self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at = deadline
            self._timer = self._event_loop().call_at(deadline, self._on_timer)

    # Gossip encryption

    def _seal(self, data: bytes) -> bytes:
        keyring = self._keyring
        if keyring is None or not self._config.gossip_verify_outgoing:
            return data
        return keyring.seal(data, self._associated)

    def _unseal(self, data: bytes, what: str) -> bytes | None:
        """The plain bytes of a received message, or None (counted, and logged at a bounded rate) if refused."""
        keyring = self._keyring
        if keyring is None:
            return data
        try:
            return keyring.unseal(data, self._associated)
        except UndecryptableError as exc:
            if not self._config.gossip_verify_incoming and data[:1] and data[0] in _PLAIN_MAGICS:
                return data  # migration: plain text still accepted, the core checks it as ever
            self._counters.undecryptable_dropped += 1
            self._undecryptable_unlogged += 1
            now = self._event_loop().time()
            if now - self._undecryptable_logged_at >= _UNDECRYPTABLE_LOG_INTERVAL:
                self._log.warning(
                    "dropped gossip no key opens",
                    last=what,
                    reason=str(exc),
                    dropped_since_last_warning=self._undecryptable_unlogged,
                )
                self._undecryptable_logged_at = now
                self._undecryptable_unlogged = 0
            return None

    def _deliver(self, event: MemberEvent) -> None:
        if event.kind in (EventKind.UPDATE, EventKind.ALIVE, EventKind.SUSPECT):
            self._log.debug("member " + event.kind.value, member=event.member.node_id, addr=event.member.gossip_addr)
        else:
            self._log.info("member " + event.kind.value, member=event.member.node_id, addr=event.member.gossip_addr)
        for callback in list(self._callbacks):
            try:
                callback(event)
            except Exception:
                self._counters.callback_errors += 1
                self._log.exception("event callback failed", kind=event.kind.value)
        for queue in self._queues:
            try:
                queue.put_nowait(event)
            except asyncio.QueueFull:
                self._counters.events_dropped += 1

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise LifecycleError("the member-list has not been started")
        return self._loop

    def _started_core(self) -> SwimCore:
        if self._core is None:
            raise LifecycleError("the member-list has not been started")
        return self._core

    def _running_core(self) -> SwimCore:
        core = self._started_core()
        if self._phase is not _Phase.RUNNING:
            raise LifecycleError("the member-list has been stopped")
        return core
