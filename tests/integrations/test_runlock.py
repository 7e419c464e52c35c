"""The run lock of a conversation, shared by synchronous and async runs: an async run waits for a
synchronous one off the event loop, and a cancelled waiter never keeps the lock."""

from __future__ import annotations

import asyncio
import contextlib
import threading

from compaction.integrations.runlock import RunLock

GUARD = 60
"""Seconds before a test that would otherwise hang fails (a deadlock guard, not a measurement)."""


async def test_an_async_run_waits_for_a_sync_run_and_the_loop_stays_free() -> None:
    lock = RunLock()
    lock.acquire()  # a synchronous run holds the conversation
    waiter = asyncio.create_task(lock.acquire_async())
    await asyncio.sleep(0)
    assert not waiter.done(), "the async run waits while the sync run holds the lock"
    beats = 0
    for _ in range(3):  # the loop runs other work while the waiter waits
        await asyncio.sleep(0)
        beats += 1
    assert beats == 3 and not waiter.done()
    threading.Thread(target=lock.release).start()  # the sync run ends, in its thread
    await asyncio.wait_for(waiter, GUARD)
    assert lock.locked(), "the async run now holds the lock"
    lock.release()


async def test_async_runs_of_one_loop_take_turns() -> None:
    lock = RunLock()
    order: list[str] = []

    async def run(name: str) -> None:
        async with lock:
            order.append(f"{name} in")
            await asyncio.sleep(0)
            order.append(f"{name} out")

    await asyncio.wait_for(asyncio.gather(run("a"), run("b"), run("c")), GUARD)
    assert order == ["a in", "a out", "b in", "b out", "c in", "c out"]
    assert not lock.locked()


async def test_a_cancelled_waiter_lets_the_lock_go_once_its_thread_gets_it() -> None:
    lock = RunLock()
    lock.acquire()
    waiter = asyncio.create_task(lock.acquire_async())
    await asyncio.sleep(0)  # the waiter now waits in a worker thread
    waiter.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiter
    lock.release()  # the sync run ends: the cancelled waiter's thread takes the lock, then lets it go
    await asyncio.wait_for(asyncio.to_thread(lock.acquire), GUARD)
    assert lock.locked()
    lock.release()
    assert not lock.locked()
