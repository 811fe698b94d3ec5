"""What every asyncio loop of the client (the producer's sender, the consumer's fetcher) does when it closes."""

from __future__ import annotations

import asyncio

from multiraft.logging import get_logger

__all__ = ["cancel_all_tasks"]

log = get_logger(__name__)


async def cancel_all_tasks(timeout_s: float) -> None:
    """Cancel every other task of the running loop and wait (up to ``timeout_s``) until each has ended, so
    that a client's loop closes with nothing pending (grpc's own tasks included)."""
    current = asyncio.current_task()
    for _ in range(3):  # a cancelled task may start another one while it ends
        tasks = [task for task in asyncio.all_tasks() if task is not current and not task.done()]
        if not tasks:
            return
        for task in tasks:
            task.cancel()
        _done, pending = await asyncio.wait(tasks, timeout=timeout_s)
        if pending:
            log.warning("client tasks did not end when cancelled", tasks=[repr(t) for t in pending][:5])
            return
