"""A node's seat in the SWIM member-list: who is alive, suspect, dead or gone, as gossip says.

The node embeds one :class:`membership.MemberList` (UDP probes and gossip on ``gossip_address``, TCP push-pull)
whose metadata carries the node's id, client and peer addresses, rack, capacity and host. Liveness everywhere in
the node (DescribeCluster's node state, the in-sync replica set, the controller's live nodes and its repair
timer) is read from here. Transport connections are not a liveness signal: a quiescent cluster sends
nothing for long stretches, and a connection can stay up to a node whose event loop is stuck.

Only addresses the member-list heard from the member itself reach the node (:meth:`NodeMembership.peers`
and the JOIN/UPDATE events), so gossip from others cannot re-point the peer transport (issue 13).

With ``gossip_keyring_file`` set, every datagram and push-pull is sealed with the keyring's primary key and
opened with any of its keys (:class:`membership.Keyring`). The file is checked every few seconds and a changed,
valid keyring replaces the one in use, so keys rotate without a restart (docs/security.md); a broken file is
logged and the keyring in use is kept.

Everything here runs on the event loop; :attr:`live_ids` and :attr:`known_ids` are republished as immutable
frozensets so that the scheduler thread can read them without a lock.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path

from membership import (
    EventKind,
    JoinError,
    Keyring,
    KeyringError,
    Member,
    MemberEvent,
    MemberList,
    MemberMeta,
    MembershipConfig,
    MemberState,
)
from membership import MembershipError as _MembershipError
from multiraft.config.node import NodeConfig, parse_address
from multiraft.errors import ConfigError
from multiraft.logging import get_logger
from multiraft.node.threads import LoopOwned

__all__ = ["NodeMembership", "LIVENESS_STATES", "KEYRING_POLL_S"]

log = get_logger(__name__)

LIVENESS_STATES = ("alive", "suspect", "dead", "left", "unknown")
_JOIN_RETRY_S = 1.0
KEYRING_POLL_S = 2.0
"""How often the gossip keyring file is checked for changes, in seconds."""


class NodeMembership(LoopOwned):
    """Start, join (retrying the seeds until one answers), answer liveness questions, leave on stop."""

    def __init__(
        self,
        config: NodeConfig,
        *,
        client_address: str,
        peer_address: str,
        on_event: Callable[[MemberEvent], None],
        keyring_poll_s: float = KEYRING_POLL_S,
    ) -> None:
        self._config = config
        profile = MembershipConfig.local if config.membership_profile == "local" else MembershipConfig.lan
        self.swim_config = profile(
            cluster_name=config.cluster_id,
            gossip_verify_incoming=config.gossip_verify_incoming,
            gossip_verify_outgoing=config.gossip_verify_outgoing,
        )
        host, port = parse_address(config.gossip_address, "gossip_address")
        self._keyring_poll_s = keyring_poll_s
        self._keyring_text: str | None = None
        keyring = self._load_keyring() if config.gossip_keyring_file else None
        self._members = MemberList(
            MemberMeta(config.node_id, client_address, peer_address, config.rack, config.capacity, config.host),
            self.swim_config,
            host=host,
            port=port,
            keyring=keyring,
        )
        self._keyring_task: asyncio.Task[None] | None = None
        self._on_event = on_event
        self._gone_at: dict[int, float] = {}  # node id -> loop time it was declared dead or left
        self.live_ids: frozenset[int] = frozenset({config.node_id})
        self.known_ids: frozenset[int] = frozenset({config.node_id})
        self.joined = asyncio.Event()
        self._join_task: asyncio.Task[None] | None = None

    def cut_gossip(self, drop: Callable[[str, bool], bool]) -> None:
        """Debug network cuts (:mod:`multiraft.node.debug`): drop gossip with some addresses."""
        self._members.drop_packet = drop

    async def start(self) -> None:
        self._members.subscribe(self._handle)
        await self._members.start()
        self._join_task = asyncio.get_running_loop().create_task(self._join())
        if self._config.gossip_keyring_file:
            self._keyring_task = asyncio.get_running_loop().create_task(self._watch_keyring())

    async def stop(self) -> None:
        """Leave gracefully (peers see "left" at once instead of waiting out a suspicion), then close."""
        for task in (self._join_task, self._keyring_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._members.running:
            with contextlib.suppress(_MembershipError):
                await self._members.leave()
        await self._members.stop()

    async def _join(self) -> None:
        seeds = [s for s in self._config.seeds if s != self._members.gossip_addr]
        if not seeds:
            self.joined.set()
            return
        delay = 0.1
        while True:
            try:
                answered = await self._members.join(seeds)
            except JoinError as exc:
                # Seeds start in any order: keep trying, a node alone in its member-list is harmless.
                log.debug("member-list join not answered yet", seeds=seeds, error=str(exc))
                await asyncio.sleep(delay)
                delay = min(delay * 2, _JOIN_RETRY_S)
                continue
            log.info("joined the member-list", seeds_answered=answered, members=self._members.num_members)
            self.joined.set()
            return

    # ------------------------------------------------------------------------------------------ keyring

    def _load_keyring(self) -> Keyring:
        """Read ``gossip_keyring_file`` at start: a missing or broken file stops the node with a clear error."""
        path = self._config.gossip_keyring_file
        try:
            text = Path(path).read_text(encoding="utf-8")
            keyring = Keyring.parse(text, source=path)
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError("gossip_keyring_file", f"cannot read {path}: {exc}") from exc
        except KeyringError as exc:
            raise ConfigError("gossip_keyring_file", str(exc)) from exc
        self._keyring_text = text
        log.info("gossip encryption on", keyring=path, keys=keyring.fingerprints())
        return keyring

    async def _watch_keyring(self) -> None:
        """Re-read the keyring file every ``keyring_poll_s`` (for the node's lifetime) and apply a changed one."""
        while True:
            await asyncio.sleep(self._keyring_poll_s)
            self.reload_keyring()

    def reload_keyring(self) -> bool:
        """Apply the keyring file if it changed and is valid; True if a new keyring is now in use."""
        path = self._config.gossip_keyring_file
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            if self._keyring_text is not None:  # said once, not at every poll
                log.warning(
                    "cannot read the gossip keyring file; keeping the keys in use", keyring=path, error=str(exc)
                )
            self._keyring_text = None
            return False
        if text == self._keyring_text:
            return False
        self._keyring_text = text  # a broken file is reported once, not at every poll
        try:
            keyring = Keyring.parse(text, source=path)
        except KeyringError as exc:
            log.error("the gossip keyring file is wrong; keeping the keys in use", keyring=path, error=str(exc))
            return False
        if keyring == self._members.keyring:
            return False
        self._members.set_keyring(keyring)
        return True

    @property
    def keyring(self) -> Keyring | None:
        """The gossip keyring in use, None when gossip is not encrypted."""
        return self._members.keyring

    # ------------------------------------------------------------------------------------------ reading

    @property
    def gossip_addr(self) -> str:
        return self._members.gossip_addr

    def state(self, node_id: int) -> str:
        """alive, suspect, dead, left, or unknown (never heard of: not yet gossiped to us)."""
        member = self._members.member(node_id)
        if member is None:
            return "unknown"
        return {
            MemberState.ALIVE: "alive",
            MemberState.SUSPECT: "suspect",
            MemberState.DEAD: "dead",
            MemberState.LEFT: "left",
        }[member.state]

    def member(self, node_id: int) -> Member | None:
        """The member-list's record of ``node_id`` (gossip address, incarnation, state), or None."""
        return self._members.member(node_id)

    def gone_for(self, node_id: int) -> float | None:
        """Seconds since the member-list declared ``node_id`` dead or saw it leave; None while it is not."""
        at = self._gone_at.get(node_id)
        if at is None:
            return None
        return asyncio.get_running_loop().time() - at

    def peers(self) -> dict[int, MemberMeta]:
        """Live members other than this node that answered it first-hand, with their metadata."""
        local = self._config.node_id
        return {m.node_id: m.meta for m in self._members.members() if m.node_id != local and m.confirmed}

    def counters(self) -> dict[str, int]:
        return self._members.counters()

    # ------------------------------------------------------------------------------------------ events

    def _handle(self, event: MemberEvent) -> None:
        node_id = event.member.node_id
        if event.kind in (EventKind.DEAD, EventKind.LEAVE):
            self._gone_at[node_id] = event.at
        elif event.kind in (EventKind.JOIN, EventKind.ALIVE):
            self._gone_at.pop(node_id, None)
        self.live_ids = frozenset(m.node_id for m in self._members.members())
        self.known_ids = frozenset(m.node_id for m in self._members.all_members())
        # MemberList logs every event itself (member join/dead/leave at info).
        if event.kind in (EventKind.JOIN, EventKind.UPDATE) and not event.member.confirmed:
            # Addresses only heard from other members are hearsay: the node's peer transport takes a member's
            # addresses once it has answered us itself (an UPDATE follows when it does).
            return
        self._on_event(event)
