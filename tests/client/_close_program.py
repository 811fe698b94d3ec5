"""A client program for test_clean_close: produces (Producer, ProduceStream) and consumes (Consumer,
Subscribe streams) a topic until its stdin closes, then closes both and exits. Run as a subprocess, so
that what the interpreter prints at exit (pending tasks, async generators) reaches the test's stderr."""

from __future__ import annotations

import gc
import sys
import threading
import time

from multiraft import Consumer, MultiraftError, Producer


def main(bootstrap: str, topic: str) -> None:
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    producer = Producer(bootstrap, linger_ms=2, request_timeout_s=3.0, delivery_timeout_s=20.0)
    consumer = Consumer(bootstrap, fetch_max_wait_ms=100, request_timeout_s=3.0)
    consumer.subscribe(topic, start="earliest")
    sent = read = 0
    deadline = time.monotonic() + 120  # bounded even if the test never closes stdin
    while not stop.is_set() and time.monotonic() < deadline:
        for i in range(20):
            producer.send(topic, b"v%d" % (sent + i), key=b"k%d" % (i % 6))
        sent += 20
        try:
            read += len(consumer.poll(0.05))
        except MultiraftError as exc:
            print(f"poll failed: {exc!r}", flush=True)
        if sent % 2000 == 0:
            gc.collect()  # as a busy program's collector would: what nothing references is reclaimed now
        if sent == 200:
            print("running", flush=True)  # the test starts its faults once records flow
    consumer.close()
    producer.close(timeout_s=5.0)
    print(f"closed sent={sent} read={read}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
