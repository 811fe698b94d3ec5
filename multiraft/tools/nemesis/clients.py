"""The nemesis clients, each a thread using the public client API and recording into the history.

* :class:`ProducerClient`: an idempotent :class:`~multiraft.Producer` sending unique values
  (``producer-0:17``) under a few keys, so that the checker can tell every record apart and knows each
  key's send order.
* :class:`ReaderClient`: a group-less :class:`~multiraft.Consumer` reading every partition from
  the start while faults happen (what a read sees must be committed: the checker compares it with the
  final log).
* :class:`GroupClient`: a consumer of a group that commits its positions and reads its committed offsets
  back (they must never go backwards).
* :class:`AdminClient`: an :class:`~multiraft.Admin` creating and deleting side topics.

Every loop is bounded by a count and by the run's deadline; every failure is recorded, never raised.
"""

from __future__ import annotations

import functools
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from multiraft import Admin, Consumer, MultiraftError, Producer, RecordMetadata, TopicPartition
from multiraft.tools.nemesis.history import History

__all__ = ["ClientSettings", "ProducerClient", "ReaderClient", "GroupClient", "AdminClient", "GROUP"]

GROUP = "nemesis-group"
_MAX_LOOPS = 1_000_000
_ERROR_PAUSE_S = 0.1


class ClientSettings:
    """What every client needs: where the cluster is, the topic, the history and when to give up."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, history: History, *, deadline: float) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.history = history
        self.deadline = deadline  # time.monotonic() after which every loop ends, whatever happens


class _Worker:
    name = "worker"

    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        self.history = settings.history
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._guarded, name=f"nemesis-{self.name}", daemon=True)
        self.crashed: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 60.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    @property
    def running(self) -> bool:
        return not self._stop.is_set() and time.monotonic() < self.settings.deadline

    def _guarded(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # recorded: a client that dies is a finding, not a harness crash
            self.crashed = exc
            self.history.record(self.name, "info", "crash", error=repr(exc))

    def _run(self) -> None:
        raise NotImplementedError


class ProducerClient(_Worker):
    def __init__(
        self,
        settings: ClientSettings,
        index: int,
        *,
        seed: int,
        keys: int = 8,
        interval_s: float = 0.01,
        delivery_timeout_s: float = 60.0,
    ) -> None:
        self.name = f"producer-{index}"
        super().__init__(settings)
        self._rng = random.Random(seed)
        self._keys = keys
        self._interval_s = interval_s
        self._delivery_timeout_s = delivery_timeout_s
        self.sent = 0

    def _run(self) -> None:
        producer = Producer(
            self.settings.bootstrap,
            linger_ms=5,
            delivery_timeout_s=self._delivery_timeout_s,
            request_timeout_s=5,
            max_block_s=5,
            metadata_max_age_s=5,
        )
        try:
            for n in range(_MAX_LOOPS):
                if not self.running:
                    break
                key = f"k{self._rng.randrange(self._keys)}"
                value = f"{self.name}:{n}"
                self.history.record(self.name, "invoke", "send", key=key, value=value)
                try:
                    future = producer.send(self.settings.topic, value.encode(), key=key.encode())
                except MultiraftError as exc:  # refused before it left: never written
                    self.history.record(self.name, "fail", "send", key=key, value=value, error=repr(exc))
                    time.sleep(_ERROR_PAUSE_S)
                    continue
                future.add_done_callback(functools.partial(self._done, key=key, value=value))
                self.sent += 1
                time.sleep(self._interval_s)
        finally:
            # Wait for every acknowledgement still due (bounded by the delivery timeout).
            producer.close(timeout_s=max(1.0, min(self._delivery_timeout_s, self.settings.deadline - time.monotonic())))

    def _done(self, future: Future[RecordMetadata], *, key: str, value: str) -> None:
        error = future.exception()
        if error is None:
            metadata = future.result()
            self.history.record(
                self.name, "ok", "send", key=key, value=value, partition=metadata.partition, offset=metadata.offset
            )
        else:  # a timed-out or failed send may still have been written: unknown, not failed
            self.history.record(self.name, "info", "send", key=key, value=value, error=repr(error))


def _rows(records: list[object]) -> list[list[object]]:
    rows: list[list[object]] = []
    for record in records:
        key = getattr(record, "key", None)
        value = getattr(record, "value", None)
        rows.append(
            [
                getattr(record, "partition", -1),
                getattr(record, "offset", -1),
                key.decode(errors="replace") if key is not None else None,
                value.decode(errors="replace") if value is not None else None,
            ]
        )
    return rows


class ReaderClient(_Worker):
    name = "reader"

    def _run(self) -> None:
        consumer = Consumer(self.settings.bootstrap, auto_offset_reset="earliest", request_timeout_s=5)
        try:
            consumer.assign([(self.settings.topic, p) for p in range(self.settings.partitions)], start="earliest")
            for _ in range(_MAX_LOOPS):
                if not self.running:
                    break
                try:
                    records = consumer.poll(timeout_s=0.3, max_records=1_000)
                except MultiraftError as exc:
                    self.history.record(self.name, "fail", "read", error=repr(exc))
                    time.sleep(_ERROR_PAUSE_S)
                    continue
                if records:
                    self.history.record(self.name, "ok", "read", rows=_rows(list(records)))
        finally:
            consumer.close()


class GroupClient(_Worker):
    name = "group"

    def __init__(self, settings: ClientSettings, *, commit_every_s: float = 0.5) -> None:
        super().__init__(settings)
        self._commit_every_s = commit_every_s

    def _run(self) -> None:
        consumer = Consumer(
            self.settings.bootstrap,
            group_id=GROUP,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            request_timeout_s=5,
        )
        tps = [TopicPartition(self.settings.topic, p) for p in range(self.settings.partitions)]
        try:
            consumer.assign(tps)
            next_commit = time.monotonic() + self._commit_every_s
            for _ in range(_MAX_LOOPS):
                if not self.running:
                    break
                try:
                    consumer.poll(timeout_s=0.2, max_records=500)
                    if time.monotonic() < next_commit:
                        continue
                    next_commit = time.monotonic() + self._commit_every_s
                    self._commit_and_read_back(consumer, tps)
                except MultiraftError as exc:
                    self.history.record(self.name, "fail", "poll", error=repr(exc))
                    time.sleep(_ERROR_PAUSE_S)
        finally:
            consumer.close()

    def _commit_and_read_back(self, consumer: Consumer, tps: list[TopicPartition]) -> None:
        offsets = {tp: consumer.position(tp) for tp in tps}
        shown = {str(tp.partition): offset for tp, offset in offsets.items()}
        self.history.record(self.name, "invoke", "commit", offsets=shown)
        try:
            consumer.commit(offsets)
        except MultiraftError as exc:  # it may have been applied
            self.history.record(self.name, "info", "commit", offsets=shown, error=repr(exc))
            return
        self.history.record(self.name, "ok", "commit", offsets=shown)
        self.history.record(self.name, "invoke", "committed")
        try:
            committed = consumer.committed(tps)
        except MultiraftError as exc:
            self.history.record(self.name, "fail", "committed", error=repr(exc))
            return
        self.history.record(
            self.name, "ok", "committed", offsets={str(tp.partition): o for tp, o in committed.items() if o is not None}
        )


class AdminClient(_Worker):
    name = "admin"

    def __init__(self, settings: ClientSettings, *, replication_factor: int, every_s: float = 1.5) -> None:
        super().__init__(settings)
        self._replication_factor = replication_factor
        self._every_s = every_s

    def _run(self) -> None:
        admin = Admin(self.settings.bootstrap, request_timeout_s=5)
        created: list[str] = []
        rf = self._replication_factor
        try:
            for n in range(_MAX_LOOPS):
                if not self.running:
                    break
                name = f"nemesis-side-{n}"
                self._act(
                    "create",
                    name,
                    functools.partial(admin.create_topic, name, partitions=1, replication_factor=rf),
                )
                created.append(name)
                if len(created) > 1:
                    old = created.pop(0)
                    self._act("delete", old, functools.partial(admin.delete_topic, old))
                self._stop.wait(self._every_s)
        finally:
            admin.close()

    def _act(self, f: str, topic: str, action: Callable[[], object]) -> None:
        self.history.record(self.name, "invoke", f, topic=topic)
        try:
            action()
        except MultiraftError as exc:
            self.history.record(self.name, "info", f, topic=topic, error=repr(exc))
        else:
            self.history.record(self.name, "ok", f, topic=topic)
