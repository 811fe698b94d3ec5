"""The quickstart's synthetic clickstream: JSON events generated in chunks, ready for ``Producer.send_batch``.

Event time is simulated: event ``i`` of ``n`` happens at ``t0 + i * span / n`` plus a little jitter (events
arrive slightly out of order, as real clickstreams do). The span is the production time multiplied by
``TIME_SPEEDUP``, so a one-minute run covers half an hour of traffic and gives the per-minute windows
something to count, whatever the number of events.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

__all__ = [
    "EVENT_SCHEMA_DDL",
    "TIME_SPEEDUP",
    "JITTER_MS",
    "Clock",
    "event_chunk",
    "end_of_stream_marker",
]

# Spark parses the JSON values with this schema (from_json); every generated event has all these fields.
EVENT_SCHEMA_DDL = (
    "event_id STRING, user_id STRING, session_id STRING, page STRING, action STRING, referrer STRING, ts TIMESTAMP"
)
TIME_SPEEDUP = 30
# Out-of-order spread of event times. Well below the Spark job's watermark delay, so no event is ever late.
JITTER_MS = 3_000

_PAGES = np.array(
    ["/", "/search", "/product", "/product/reviews", "/cart", "/checkout", "/account", "/help"], dtype=object
)
_PAGE_WEIGHTS = np.array([0.22, 0.2, 0.25, 0.06, 0.1, 0.06, 0.06, 0.05])
_ACTIONS = np.array(["view", "click", "scroll", "add_to_cart", "purchase"], dtype=object)
_ACTION_WEIGHTS = np.array([0.5, 0.25, 0.15, 0.07, 0.03])
_REFERRERS = np.array(["", "google.com", "bing.com", "newsletter", "twitter.com", "partner-shop.example"], dtype=object)
_REFERRER_WEIGHTS = np.array([0.45, 0.3, 0.05, 0.1, 0.06, 0.04])
_USERS = 20_000
_SESSIONS_PER_USER = 4


@dataclass(frozen=True, slots=True)
class Clock:
    """Maps an event's sequence number to its simulated event time (ms since the epoch)."""

    t0_ms: int
    span_ms: int
    events: int

    def at(self, index: np.ndarray) -> np.ndarray:
        return self.t0_ms + (index * self.span_ms) // max(self.events, 1)

    @property
    def end_ms(self) -> int:
        """No event of the run has an event time at or after this (the last one plus the largest jitter)."""
        return self.t0_ms + self.span_ms + JITTER_MS + 1


def _iso(ms: np.ndarray) -> np.ndarray:
    # ISO-8601 with milliseconds and a Z: the format Spark's from_json parses into a TIMESTAMP by default.
    return np.datetime_as_string(ms.astype("datetime64[ms]"), unit="ms", timezone="UTC")


def event_chunk(start: int, count: int, clock: Clock, rng: np.random.Generator) -> tuple[pa.Array, pa.Array]:
    """Events ``start`` to ``start + count - 1``: (keys, values) as Arrow string arrays; the key is the user id.

    Choices are drawn with numpy for the whole chunk; only the final JSON formatting runs per event.
    """
    index = np.arange(start, start + count, dtype=np.int64)
    # Zipf-like popularity: a few users produce most of the traffic, as on a real site.
    users = np.minimum(rng.zipf(1.3, count), _USERS) - 1
    user_ids = np.char.add("u", np.char.zfill(users.astype(str), 5))
    sessions = (users * _SESSIONS_PER_USER + (index * _SESSIONS_PER_USER) // max(clock.events, 1)) % (
        _USERS * _SESSIONS_PER_USER
    )
    pages = rng.choice(_PAGES, count, p=_PAGE_WEIGHTS)
    actions = rng.choice(_ACTIONS, count, p=_ACTION_WEIGHTS)
    referrers = rng.choice(_REFERRERS, count, p=_REFERRER_WEIGHTS)
    times = _iso(clock.at(index) + rng.integers(0, JITTER_MS, count))
    values = [
        json.dumps(
            {
                "event_id": f"e{i:09d}",
                "user_id": u,
                "session_id": f"s{s:06d}",
                "page": p,
                "action": a,
                "referrer": r or None,
                "ts": t,
            },
            separators=(",", ":"),
        )
        for i, u, s, p, a, r, t in zip(
            index.tolist(),
            user_ids.tolist(),
            sessions.tolist(),
            pages.tolist(),
            actions.tolist(),
            referrers.tolist(),
            times.tolist(),
            strict=True,
        )
    ]
    return pa.array(user_ids.tolist(), pa.string()), pa.array(values, pa.string())


def end_of_stream_marker(clock: Clock, watermark_delay_ms: int) -> tuple[str, str]:
    """(key, value) of the record that ends the run: it carries no event id and an event time far enough past
    the last event that Spark's watermark passes the last window and append mode emits it."""
    ts_ms = np.array([clock.end_ms + watermark_delay_ms + 60_000], dtype=np.int64)
    return "end-of-stream", json.dumps({"kind": "end_of_stream", "ts": str(_iso(ts_ms)[0])}, separators=(",", ":"))
