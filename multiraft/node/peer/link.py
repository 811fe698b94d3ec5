"""Our outbound connection to one peer, and the order of everything written on it, from any thread.

The scheduler thread writes a round's frames on the socket itself (``write_direct``) instead of handing them to
the event loop: a hand-off costs a wake-up of the loop (asyncio's self-pipe) and a wait for the GIL, and it sits
twice on an acknowledgement's critical path (the leader's appends, the follower's ack). asyncio's transports
are not thread-safe, so:

* every write on the connection, from either thread, holds the link's ``lock``;
* the scheduler writes on the socket only while the transport's write buffer is empty and nothing handed to the
  loop waits (``handed``); otherwise it hands its frames to the loop, and keeps doing so until the loop has
  written them all: frames leave in the order they were written, and never interleave;
* a direct write the kernel takes only in part hands the rest over as raw bytes tied to that connection (never
  written on another);
* the socket is a duplicate of the transport's (``os.dup``), closed under the lock before the transport closes
  its own, so a direct write never reaches a file descriptor the loop closed and the system reused;
* plain TCP only: a TLS connection's bytes are the TLS object's, so TLS keeps the loop's path (``sock`` None).

A direct write that fails (the peer reset the connection) is handled as the loop's own write failure: the
frames are lost (Raft retransmits), the transport is aborted on the loop, and its watcher reports the peer
unreachable and dials again.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading

from multiraft.node.peer.frames import Frame
from multiraft.node.threads import ThreadShared

__all__ = ["PeerLink", "Rest", "DirectOutcome", "MAX_PARTS"]

MAX_PARTS = 512  # buffers per sendmsg (IOV_MAX is 1024 on Linux); more are joined first

Rest = tuple[asyncio.StreamWriter, memoryview]
"""The unwritten end of a direct write: only the connection (writer) it began on may carry it."""


class DirectOutcome:
    SENT = 0  # all of it is on the socket (or its rest handed to the loop)
    NOT_NOW = 1  # not written: hand the frames to the loop (no plain socket, a buffer, or frames handed before)
    FAILED = 2  # the socket failed: the frames are lost and the connection is being dropped


class PeerLink(ThreadShared):
    """Our outbound connection to one peer (``writer``, on the loop) and what waits to be written on it.

    Shared: both threads write on it, each holding ``lock``."""

    def __init__(self, node_id: int, address: str, backoff_s: float) -> None:
        self.node_id = node_id
        self.address = address
        self.writer: asyncio.StreamWriter | None = None
        self.connecting: asyncio.Task[None] | None = None
        self.backoff = backoff_s
        self.next_dial = 0.0
        self.lock = threading.Lock()  # held by every write on the connection, from either thread
        self.handed: list[list[Frame] | Rest] = []  # handed to the loop, in order, not yet written
        self.sock: socket.socket | None = None  # a duplicate of writer's socket (plain TCP), for direct writes
        self.direct_writes = 0  # writes that went straight to the socket (tests and diagnostics)

    # ------------------------------------------------------------------------------ the loop's side

    def attach(self, writer: asyncio.StreamWriter, *, direct: bool) -> None:
        """A new connection (loop): from now on writes go to it; ``direct`` lets other threads write on it."""
        sock = None
        if direct:
            raw = writer.get_extra_info("socket")
            if raw is not None:
                sock = socket.socket(fileno=os.dup(raw.fileno()))
                sock.setblocking(False)
        with self.lock:
            self._close_socket()
            self.writer = writer
            self.sock = sock

    def close(self) -> None:
        """Close the connection (loop); its watcher then detaches it."""
        with self.lock:
            self._close_socket()
            writer = self.writer
        if writer is not None:
            writer.close()

    def detach(self, writer: asyncio.StreamWriter) -> bool:
        """The connection ``writer`` ended (loop): close it; True if it was the current one (now there is none)."""
        with self.lock:
            current = self.writer is writer
            if current:
                self._close_socket()
                self.writer = None
        writer.close()
        return current

    def _close_socket(self) -> None:
        # First, under the lock: no direct write is under way, and none starts on this socket again.
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    # ------------------------------------------------------------------------------ the scheduler's side

    def write_direct(self, out: list[bytes | memoryview], size: int) -> int:
        """Write ``out`` (``size`` bytes of whole frames) on the socket from this thread, if the link allows it
        now (call with ``lock`` held, off the loop). Returns a :class:`DirectOutcome`; on SENT a rest the
        socket did not take is in ``handed`` (the caller then wakes the loop)."""
        writer, sock = self.writer, self.sock
        if sock is None or writer is None or self.handed or writer.is_closing():
            return DirectOutcome.NOT_NOW
        if writer.transport.get_write_buffer_size():
            return DirectOutcome.NOT_NOW  # the loop is still writing: ours go after it, through it
        try:
            sent = sock.sendmsg(out) if len(out) <= MAX_PARTS else sock.send(b"".join(out))
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._close_socket()  # the loop drops the connection (the caller posts the abort)
            return DirectOutcome.FAILED
        self.direct_writes += 1
        if sent < size:
            self.handed.append((writer, memoryview(b"".join(out))[sent:]))
        return DirectOutcome.SENT
