"""A memory's per-key state is bounded: the per-key locks live only while a caller holds or
waits for them (weak references), the loaded sessions are the ``keep_sessions`` most recent, and
``compactions`` keeps the latest ``keep_compactions`` results (the log keeps every compaction).
10,000 keys through the memory and its run locks leave the traced memory flat."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc

import pytest

from compaction.integrations.memory import CompactingMemory
from tests.integrations.test_recorded_index import turn

KEYS = 10_000
WARM = 1_000


async def use(memory: CompactingMemory, key: str) -> int:
    """What an adapter does with a key: hold its run lock, read its surface (under the key's lock)."""
    async with memory.run_lock(key):
        return await memory.view(key, lambda found: len(found.after))


@pytest.mark.slow
async def test_ten_thousand_keys_leave_the_memory_flat(url: str) -> None:
    """On SQLite (the in-memory store's own index grows by one entry per key looked up)."""
    memory = CompactingMemory(url, context_window=100_000, keep_sessions=64)
    try:
        for k in range(WARM):
            await use(memory, f"key-{k}")
        gc.collect()
        tracemalloc.start()
        try:
            baseline = tracemalloc.get_traced_memory()[0]
            for k in range(WARM, KEYS):
                await use(memory, f"key-{k}")
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0] - baseline
        finally:
            tracemalloc.stop()
        counts = (len(memory._locks), len(memory._run_locks), len(memory._kept))
        assert counts[0] <= 64 and counts[1] <= 64 and counts[2] <= 64, counts
        # before the bound: about 1.5 KB a key kept forever (9,000 keys: 13 MB traced); now about
        # 14 bytes a key (the interpreter's own caches)
        assert grown < 512 * 1024, f"{grown} bytes more after {KEYS - WARM} more keys"
    finally:
        memory.close()


async def test_a_held_or_awaited_lock_is_never_dropped() -> None:
    memory = CompactingMemory("memory://", context_window=100_000)
    try:
        held = memory.run_lock("k")
        await held.acquire_async()
        gc.collect()
        assert memory.run_lock("k") is held and memory.run_lock("k").locked()
        waiter = asyncio.ensure_future(use(memory, "k"))
        await asyncio.sleep(0.05)
        gc.collect()
        assert not waiter.done() and memory.run_lock("k") is held
        held.release()
        assert await asyncio.wait_for(waiter, 30) == 0
        lock = memory.lock("k")
        async with lock:
            gc.collect()
            assert memory.lock("k") is lock
    finally:
        memory.close()


def test_compactions_keeps_the_latest_results(url: str) -> None:
    memory = CompactingMemory(url, context_window=2_000, keep_compactions=3)
    try:
        for k in range(30):
            memory.record_sync("k", turn(k), origin=f"turn {k}")
            memory.surface_sync("k")  # compacts under pressure
        kept = list(memory.compactions)
        assert len(kept) == 3, len(kept)
        session = memory.load_sync("k")
        summaries = [e.seq for e in session.events() if e.type == "compact/summary"]
        assert len(summaries) > 3, "the log keeps every compaction"
        assert [r.summary_seq for r in kept] == summaries[-3:]
    finally:
        memory.close()
