"""A private asyncio event loop on a background thread, for synchronous callers of an async client.

nats-py is asyncio-only; eventsourcing's recorders are synchronous interfaces, called from any
thread (the CLI's main thread, projection runners, the agent loop's ``asyncio.to_thread`` workers).
:class:`LoopThread` owns one event loop running on one daemon thread; :meth:`LoopThread.run` submits a
coroutine to it with ``asyncio.run_coroutine_threadsafe`` and blocks the calling thread until the
result (or the exception) is back. The NATS connection lives on that loop only, so its reader task,
pings and reconnects keep running between calls, and calls from several threads are serialised by
the loop, never run on two loops at once. Calling :meth:`run` from the loop's own thread would wait
for itself forever, so it is refused.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """One event loop on one daemon thread; :meth:`run` executes coroutines on it."""

    def __init__(self, name: str = "compaction-nats") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self.loop.is_closed()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """The coroutine's result, computed on the loop's thread; its exception is raised here."""
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RuntimeError(
                "LoopThread.run was called from the loop's own thread; it would wait for itself"
            )
        if not self.running:
            coroutine.close()
            raise RuntimeError("LoopThread.run: the loop has been closed")
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        return future.result(timeout)

    def close(self) -> None:
        """Stop the loop after cancelling what still runs on it, and join its thread."""
        if not self.running:
            return
        self.run(_cancel_others())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


async def _cancel_others() -> None:
    current = asyncio.current_task()
    others = [t for t in asyncio.all_tasks() if t is not current]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)
