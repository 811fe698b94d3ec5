"""The history of a nemesis run: every operation's invocation and completion, and every fault, in order.

A history is a JSON-lines file, one :class:`Event` per line, written as the run goes (so a run that crashes
keeps what happened up to the crash). The checker reads events only: a history file can be checked again
(``load_history``) without the cluster that produced it, which is what makes a failed run replayable and
debuggable. ``type`` follows Jepsen: ``invoke`` then ``ok`` (it happened), ``fail`` (it did not) or ``info``
(unknown, e.g. a timed-out write that may have been applied).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = ["Event", "EventType", "History", "load_history"]

EventType = Literal["invoke", "ok", "fail", "info"]


@dataclass(frozen=True, slots=True)
class Event:
    time_s: float
    """Seconds since the run started (monotonic clock)."""
    process: str
    """Who acted: ``producer-0``, ``reader``, ``group``, ``admin``, ``nemesis``, ``final``."""
    type: EventType
    f: str
    """The operation: ``send``, ``read``, ``commit``, ``committed``, ``create``, ``delete``, ``fault``, ``heal``..."""
    value: dict[str, Any]

    def to_json(self) -> str:
        return json.dumps(
            {"t": round(self.time_s, 4), "p": self.process, "type": self.type, "f": self.f, "v": self.value},
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, line: str) -> Event:
        document = json.loads(line)
        return cls(float(document["t"]), str(document["p"]), document["type"], str(document["f"]), document["v"])


class History:
    """Thread-safe, append-only; every event goes to the file at once (line-buffered)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("w", buffering=1, encoding="utf-8")
        self._lock = threading.Lock()
        self._events: list[Event] = []
        self._started = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self._started

    def record(self, process: str, type_: EventType, f: str, **value: Any) -> Event:
        with self._lock:
            event = Event(self.now(), process, type_, f, value)
            self._events.append(event)
            if not self._file.closed:
                self._file.write(event.to_json() + "\n")
            return event

    def events(self) -> list[Event]:
        with self._lock:
            return list(self._events)

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load_history(path: str | Path) -> list[Event]:
    """The events of a history file, in the order they were recorded."""
    with Path(path).open(encoding="utf-8") as lines:
        return [Event.from_json(line) for line in lines if line.strip()]
