"""A private asyncio event loop on a background thread, for synchronous callers of an async client.

nats-py is asyncio-only; eventsourcing's recorders are synchronous interfaces, called from any
thread (the CLI's main thread, projection runners, the agent loop's ``asyncio.to_thread`` workers).
:class:`LoopThread` owns one event loop running on one daemon thread; :meth:`LoopThread.run` starts
a coroutine on it as a task and blocks the calling thread on a lock that the task's done-callback
releases, until the result (or the exception) is back. That hop is the whole cost a synchronous
save pays for the loop, so it is kept to one ``call_soon_threadsafe`` and one lock (no
``concurrent.futures`` future, no condition variable). The NATS connection lives on that loop
only, so its reader task, pings and reconnects keep running between calls, and calls from several
threads are serialised by the loop, never run on two loops at once. Calling :meth:`run` from the
loop's own thread would wait for itself forever, so it is refused. Store handles of one process
share one connection and so one loop (:mod:`compaction.sessions.nats.shared`), uvloop's when it is
installed (:func:`new_loop`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def new_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop when it is installed (the ``nats`` extra installs it; its transports and
    scheduling are compiled, so a save costs the client about a fifth less CPU), else asyncio's."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - the nats extra installs it
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class LoopThread:
    """One event loop on one daemon thread; :meth:`run` executes coroutines on it."""

    def __init__(self, name: str = "compaction-nats") -> None:
        self.loop = new_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self.loop.is_closed()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """The coroutine's result, computed on the loop's thread; its exception is raised here
        (:class:`concurrent.futures.CancelledError` when the loop cancelled it, as on close)."""
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RuntimeError(
                "LoopThread.run was called from the loop's own thread; it would wait for itself"
            )
        if not self.running:
            coroutine.close()
            raise RuntimeError("LoopThread.run: the loop has been closed")
        call = _Call(coroutine)
        self.loop.call_soon_threadsafe(call.start)
        return call.result()

    def close(self) -> None:
        """Stop the loop after cancelling what still runs on it, and join its thread."""
        if not self.running:
            return
        self.run(_cancel_others())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class _Call(Generic[T]):
    """One coroutine run on the loop for one waiting thread."""

    __slots__ = ("_coroutine", "_done", "_task")

    def __init__(self, coroutine: Coroutine[Any, Any, T]) -> None:
        self._coroutine = coroutine
        self._done = threading.Lock()
        self._done.acquire()  # released when the task is done
        self._task: asyncio.Task[T] | None = None

    def start(self) -> None:
        """On the loop: start the task; its end releases the waiting thread."""
        self._task = asyncio.get_running_loop().create_task(self._coroutine)
        self._task.add_done_callback(self._finished)

    def _finished(self, _: object) -> None:
        self._done.release()

    def result(self) -> T:
        """Wait for the task; its result, or its exception raised here."""
        self._done.acquire()
        assert self._task is not None
        if self._task.cancelled():
            raise concurrent.futures.CancelledError(f"cancelled on the loop: {self._coroutine!r}")
        return self._task.result()


async def _cancel_others() -> None:
    current = asyncio.current_task()
    others = [t for t in asyncio.all_tasks() if t is not current]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)
