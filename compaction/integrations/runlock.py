"""A conversation's run lock, for synchronous and asynchronous runs alike.

A framework runs an agent from synchronous code (LangChain's ``invoke``, pydantic-ai's
``run_sync``, each in a thread of its own) and from async code (``ainvoke``, ``run``), possibly on
several event loops. :class:`RunLock` is one :class:`threading.Lock` they all take: a synchronous
run blocks its thread on it; an async run waits for it in a worker thread of a small pool kept for
this (:data:`WAITERS`), never on the event loop, after the async runs of its own loop ahead of it
(an :class:`asyncio.Lock` per loop, so a loop has one waiting thread per conversation, not one per
run). A cancelled waiter lets the lock go as soon as its thread gets it.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType

WAITERS = ThreadPoolExecutor(max_workers=32, thread_name_prefix="compaction-run-lock")
"""The threads async runs wait in while a synchronous run holds their conversation's lock."""


class RunLock:
    """One conversation's run lock: ``with`` in synchronous code, ``async with`` in async code,
    or :meth:`acquire` / :meth:`acquire_async` and :meth:`release` (from any thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self._guard = threading.Lock()

    def locked(self) -> bool:
        return self._lock.locked()

    def acquire(self) -> None:
        """Wait (blocking this thread) until no other run holds the lock, then hold it."""
        self._lock.acquire()

    def release(self) -> None:
        self._lock.release()

    async def acquire_async(self) -> None:
        """Wait, off the event loop, until no other run holds the lock, then hold it."""
        async with self._queue():
            if self._lock.acquire(blocking=False):
                return
            waiting = asyncio.get_running_loop().run_in_executor(WAITERS, self._lock.acquire)
            try:
                await asyncio.shield(waiting)
            except asyncio.CancelledError:
                waiting.add_done_callback(self._let_go_once_held)
                raise

    def _let_go_once_held(self, waiting: asyncio.Future[bool] | Future[bool]) -> None:
        """A cancelled waiter's thread got the lock after the waiter gave up: release it."""
        if not waiting.cancelled() and waiting.exception() is None:
            self._lock.release()

    def _queue(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        with self._guard:
            queue = self._queues.get(loop)
            if queue is None:
                queue = self._queues[loop] = asyncio.Lock()
            return queue

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    async def __aenter__(self) -> RunLock:
        await self.acquire_async()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.release()
