"""Where a producer's id and epoch come from: ``InitProducer`` on the cluster for a normal idempotent
producer, or derived from its key for a replay producer (docs/client.md).

Kept apart from the producer and its sender so that the id rules (the replay id space, the epoch range, the
checks of the replay arguments) and the one RPC that hands ids out are in one place.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable

import grpc
import grpc.aio

from multiraft.errors import AuthenticationFailedError, AuthorizationFailedError, ConfigError
from multiraft.logging import get_logger
from rpc.client._cluster import ClusterClient
from rpc.client._partition_state import BACKOFF_MAX_S, BACKOFF_START_S
from rpc.proto import multiraft_pb2 as pb
from rpc.proto import multiraft_pb2_grpc as pb_grpc
from rpc.proto.status import from_rpc_error

__all__ = ["MAX_PRODUCER_EPOCH", "replay_producer_id", "replay_identity", "request_producer_id"]

log = get_logger(__name__)

# Producer epochs travel as an i16 in the batch header (storage/batch.py) and must be >= 0.
MAX_PRODUCER_EPOCH = 2**15 - 1
# Replay producer ids have bit 62 set: the controller counts its ids up from 1 and will never reach 2**62, and
# the header's i64 keeps them positive (negative ids mean "not idempotent").
_REPLAY_ID_BIT = 1 << 62


def replay_producer_id(replay_key: str) -> int:
    """The producer id a replay producer with ``replay_key`` writes under: 62 bits of BLAKE2b of the key's
    UTF-8 bytes, with bit 62 set (never an id the controller hands out)."""
    digest = hashlib.blake2b(replay_key.encode(), digest_size=8, person=b"multiraft-replay").digest()
    return (int.from_bytes(digest, "big") & (_REPLAY_ID_BIT - 1)) | _REPLAY_ID_BIT


def replay_identity(replay_key: str | None, replay_epoch: int, *, idempotence: bool) -> tuple[int, int] | None:
    """The (producer id, epoch) of a replay producer, None without ``replay_key``; :class:`ConfigError`
    names the wrong argument."""
    if replay_key is None:
        if replay_epoch != 0:
            raise ConfigError("replay_epoch", "is only meaningful with replay_key")
        return None
    if not isinstance(replay_key, str) or not replay_key:
        raise ConfigError("replay_key", f"must be a non-empty str, got {replay_key!r}")
    if not idempotence:
        raise ConfigError("replay_key", "needs idempotence=True (replays are deduplicated by sequence)")
    if (
        not isinstance(replay_epoch, int)
        or isinstance(replay_epoch, bool)
        or not 0 <= replay_epoch <= MAX_PRODUCER_EPOCH
    ):
        raise ConfigError("replay_epoch", f"must be an int from 0 to {MAX_PRODUCER_EPOCH}, got {replay_epoch!r}")
    return replay_producer_id(replay_key), replay_epoch


async def request_producer_id(
    client: ClusterClient,
    channel: Callable[[str], grpc.aio.Channel],
    timeout_s: float,
    stopping: Callable[[], bool],
) -> tuple[int, int] | None:
    """A fresh (producer id, epoch) from any node, asking each in turn with backoff until one answers or
    ``stopping()``; None if the cluster does not know InitProducer (or on stopping). Raises
    :class:`AuthenticationFailedError` or :class:`AuthorizationFailedError`, which no retry mends."""
    backoff = BACKOFF_START_S
    while not stopping():
        for address in client.addresses():
            stub = pb_grpc.LogStub(channel(address))
            try:
                response = await stub.InitProducer(pb.InitProducerRequest(), timeout=timeout_s)
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                    return None
                error = from_rpc_error(exc)
                if isinstance(error, AuthenticationFailedError | AuthorizationFailedError):
                    raise error from exc
                log.debug("InitProducer failed", address=address, error=str(error))
                continue
            return response.producer_id, response.producer_epoch
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, BACKOFF_MAX_S)
    return None
