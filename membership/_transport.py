"""How the runtime reaches the network: an injected :class:`Transport`, by default UDP plus TCP on one port.

Probes and gossip go over UDP, one packet per datagram; push-pull state exchanges go over TCP, framed with
a u32 length. Both listen on the same port (as memberlist), so one ``host:port`` names a member.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import struct
from collections.abc import Callable
from typing import Any, Protocol

import structlog

from membership._types import Counters, split_host_port
from membership.errors import TransportError

__all__ = ["Transport", "PacketHandler", "StreamHandler", "NetTransport", "format_address"]

PacketHandler = Callable[[str, bytes], None]
"""Called with (sender ``host:port``, datagram) for each datagram received."""
StreamHandler = Callable[[bytes], bytes | None]
"""Called with a push-pull request; returns the reply, or None to close without one."""

_LENGTH = struct.Struct(">I")
_BIND_ATTEMPTS = 16
_ADDRESS_CACHE_LIMIT = 4096
_WILDCARDS = ("", "0.0.0.0", "::")

# A stdlib logger underneath: unconfigured, info stays silent and warnings go to stderr, never stdout.
_log: structlog.stdlib.BoundLogger = structlog.wrap_logger(logging.getLogger(__name__))


class Transport(Protocol):
    """What the runtime needs from a network."""

    async def start(self, on_packet: PacketHandler, on_stream: StreamHandler) -> str:
        """Bind, start delivering to the handlers, and return the advertised ``host:port``."""
        ...

    def send_packet(self, addr: str, data: bytes) -> None:
        """Send one datagram, best effort; never raises."""
        ...

    async def exchange(self, addr: str, data: bytes, timeout: float) -> bytes:
        """Send a request over a stream and return the reply; raises :class:`TransportError`."""
        ...

    async def close(self) -> None: ...


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self, owner: NetTransport) -> None:
        self._owner = owner

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        self._owner.datagram_received(data, addr)

    def error_received(self, exc: Exception) -> None:
        # ICMP errors, e.g. port unreachable after a member stopped: the probe will notice.
        self._owner.counters.send_errors += 1
        _log.debug("udp error", error=str(exc))


class NetTransport:
    """UDP for packets and TCP for push-pull, on the same port. ``port=0`` picks a free one.

    ``host`` is an IP address to bind; when it is a wildcard (``0.0.0.0``), ``advertise_host`` must name the
    address peers should use.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        advertise_host: str | None = None,
        stream_timeout: float = 10.0,
        max_stream_bytes: int = 16 * 1024 * 1024,
        counters: Counters | None = None,
    ) -> None:
        self.counters = counters if counters is not None else Counters()
        self._host = host
        self._port = port
        self._advertise_host = advertise_host or host
        self._stream_timeout = stream_timeout
        self._max_stream_bytes = max_stream_bytes
        self._udp: asyncio.DatagramTransport | None = None
        self._server: asyncio.Server | None = None
        self._on_packet: PacketHandler | None = None
        self._on_stream: StreamHandler | None = None
        self._addresses: dict[str, tuple[str, int]] = {}
        self._connections: set[asyncio.Task[None]] = set()
        self.bound_port = 0

    async def start(self, on_packet: PacketHandler, on_stream: StreamHandler) -> str:
        if self._advertise_host in _WILDCARDS:
            raise TransportError(f"bound to all interfaces ({self._host!r}): set advertise_host to a reachable IP")
        self._on_packet, self._on_stream = on_packet, on_stream
        loop = asyncio.get_running_loop()
        # Peers check that a member's packets come from the address it advertises, and packets show an IP.
        self._advertise_host = await _resolve(loop, self._advertise_host)
        failure: OSError | None = None
        # With port 0 the TCP port is picked first; UDP may find it taken, so try again with another.
        for _ in range(_BIND_ATTEMPTS if self._port == 0 else 1):
            try:
                server = await asyncio.start_server(self._serve, self._host, self._port)
            except OSError as exc:
                raise TransportError(f"cannot listen on TCP {self._host}:{self._port}: {exc}") from exc
            port = server.sockets[0].getsockname()[1]
            try:
                udp, _ = await loop.create_datagram_endpoint(lambda: _Datagrams(self), local_addr=(self._host, port))
            except OSError as exc:
                failure = exc
                server.close()
                await server.wait_closed()
                continue
            self._server, self._udp, self.bound_port = server, udp, port
            return format_address(self._advertise_host, port)
        raise TransportError(f"cannot bind UDP {self._host}:{self._port}: {failure}") from failure

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        if self._on_packet is not None:
            self._on_packet(format_address(str(addr[0]), addr[1]), data)

    def send_packet(self, addr: str, data: bytes) -> None:
        udp = self._udp
        if udp is None or udp.is_closing():
            return
        target = self._addresses.get(addr)
        if target is None:
            try:
                target = split_host_port(addr)
            except ValueError:
                self.counters.send_errors += 1
                return
            if len(self._addresses) >= _ADDRESS_CACHE_LIMIT:
                self._addresses.clear()
            self._addresses[addr] = target
        try:
            udp.sendto(data, target)
        except OSError as exc:
            self.counters.send_errors += 1
            _log.debug("udp send failed", to=addr, error=str(exc))

    async def exchange(self, addr: str, data: bytes, timeout: float) -> bytes:
        try:
            host, port = split_host_port(addr)
        except ValueError as exc:
            raise TransportError(str(exc)) from exc
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(host, port)
                try:
                    writer.write(_LENGTH.pack(len(data)) + data)
                    await writer.drain()
                    reply = await self._read_frame(reader)
                finally:
                    writer.close()
                    with contextlib.suppress(OSError):
                        await writer.wait_closed()
        except TimeoutError as exc:
            raise TransportError(f"push-pull with {addr} timed out after {timeout} s") from exc
        except (OSError, asyncio.IncompleteReadError) as exc:
            raise TransportError(f"push-pull with {addr} failed: {exc!r}") from exc
        return reply

    async def close(self) -> None:
        if self._udp is not None:
            self._udp.close()
            self._udp = None
        if self._server is not None:
            self._server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            async with asyncio.timeout(self._stream_timeout):
                request = await self._read_frame(reader)
                reply = self._on_stream(request) if self._on_stream is not None else None
                if reply is not None:
                    writer.write(_LENGTH.pack(len(reply)) + reply)
                    await writer.drain()
        except (TimeoutError, OSError, asyncio.IncompleteReadError, TransportError) as exc:
            self.counters.push_pull_failures += 1
            _log.debug("push-pull request failed", error=repr(exc))
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            if task is not None:
                self._connections.discard(task)

    async def _read_frame(self, reader: asyncio.StreamReader) -> bytes:
        (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
        if length > self._max_stream_bytes:
            self.counters.malformed_dropped += 1
            raise TransportError(f"stream frame of {length} bytes exceeds {self._max_stream_bytes}")
        return await reader.readexactly(length)


async def _resolve(loop: asyncio.AbstractEventLoop, host: str) -> str:
    """``host`` as an IP literal (a name is resolved once, at start)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return host
    try:
        infos = await loop.getaddrinfo(host, None, type=socket.SOCK_DGRAM)
    except OSError as exc:
        raise TransportError(f"cannot resolve advertise host {host!r}: {exc}") from exc
    if not infos:
        raise TransportError(f"advertise host {host!r} resolves to no address")
    return str(infos[0][4][0])
