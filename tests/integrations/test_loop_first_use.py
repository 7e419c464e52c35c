"""Nothing blocks the event loop, the first use included: 20 conversations through
``CompactingSession`` on PostgreSQL while a heartbeat task sleeps 5 ms at a time. The memory opens
its store (the driver's import, the pool, the tables) on first use in a worker thread, not in its
constructor on the loop.

A correctness bound on blocking, not a benchmark: a beat's lag counts against the loop only for the
part of it a plain thread of the same process did not lag too (when the machine or the interpreter
did not run this process at all, no loop code is to blame), and at most for the longest single loop
callback that ran within it (a lag without one is the loop waiting for its turn, not blocked). The
framework is imported before the loop starts, as an application does; the library's own first-use
work is inside the measurement."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from tests.integrations.support import require_framework

require_framework("agents", "openai-agents")

from agents import Runner  # noqa: E402

from compaction.integrations.memory import CompactingMemory  # noqa: E402
from compaction.integrations.openai_agents import CompactingSession  # noqa: E402
from compaction.sessions.store import SessionStore  # noqa: E402
from tests.integrations.test_agents_runs import LongRunModel, agent  # noqa: E402

BEAT = 0.005
BOUND = 0.100
"""The longest the loop may be blocked, in seconds."""


class Ticks:
    """A plain thread that wakes every millisecond and keeps its gaps: when it lagged, the process
    was not running, whatever the loop was doing."""

    def __init__(self) -> None:
        self.gaps: list[tuple[float, float]] = []  # (woke at, slept since)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last = time.perf_counter()
        while not self.stop.is_set():
            time.sleep(0.001)
            now = time.perf_counter()
            self.gaps.append((now, last))
            last = now

    def lag_within(self, start: float, end: float) -> float:
        """The control thread's longest overlap of ``start``..``end`` without a wake-up."""
        worst = 0.0
        for woke, since in self.gaps:
            overlap = min(woke, end) - max(since, start)
            worst = max(worst, overlap)
        return worst


def longest_within(callbacks: list[tuple[float, float, str]], start: float, end: float) -> float:
    """The longest part of ``start``..``end`` one loop callback ran for: a beat lags through a
    callback that blocks; a lag with no long callback in it is the loop waiting for its turn to run
    (the interpreter lock, the machine), not loop code blocking."""
    return max((min(s + d, end) - max(s, start) for d, s, _ in callbacks), default=0.0)


async def heartbeat(beats: list[tuple[float, float]], stop: asyncio.Event) -> None:
    """Sleep ``BEAT`` at a time; keep (asked at, woke at) of each beat."""
    while not stop.is_set():
        asked = time.perf_counter()
        await asyncio.sleep(BEAT)
        beats.append((asked, time.perf_counter()))


@pytest.mark.slow
async def test_twenty_conversations_never_block_the_loop(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop_thread = threading.get_ident()
    opened_on: list[int] = []
    original_open = SessionStore.open.__func__  # type: ignore[attr-defined]

    def watched_open(cls: type[SessionStore], *args: Any, **kwargs: Any) -> SessionStore:
        opened_on.append(threading.get_ident())
        return original_open(cls, *args, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(SessionStore, "open", classmethod(watched_open))
    callbacks: list[tuple[float, float, str]] = []
    original_run = asyncio.events.Handle._run

    def timed(handle: asyncio.Handle) -> None:  # names the callback that blocked, if one did
        start = time.perf_counter()
        try:
            original_run(handle)
        finally:
            end = time.perf_counter()
            if end - start > 0.005:
                callbacks.append((end - start, start, repr(handle)[:300]))

    monkeypatch.setattr(asyncio.events.Handle, "_run", timed)
    await Runner.run(agent(LongRunModel(reads=0)), "warm up")  # the framework's own first use
    callbacks.clear()
    ticks = Ticks()
    ticks.thread.start()
    beats: list[tuple[float, float]] = []
    stop = asyncio.Event()
    beating = asyncio.create_task(heartbeat(beats, stop))
    agents = [agent(LongRunModel(reads=8)) for _ in range(20)]  # the application's own objects
    await asyncio.sleep(0.05)  # the heartbeat runs before the first use
    try:
        memory = CompactingMemory(pg_url, context_window=6000, framework="openai-agents")
        sessions = [CompactingSession(f"user-{k}", memory=memory) for k in range(20)]
        pairs = enumerate(zip(sessions, agents, strict=True))
        await asyncio.gather(*(s.run(a, f"task {k}") for k, (s, a) in pairs))
    finally:
        stop.set()
        await beating
        ticks.stop.set()
        ticks.thread.join()
    memory.close()
    assert memory.compactions, "the runs never compacted"
    lags = [(woke - asked - BEAT, asked, woke) for asked, woke in beats]
    blocked = [
        (min(lag - ticks.lag_within(asked, woke), longest_within(callbacks, asked, woke)), lag, asked)
        for lag, asked, woke in lags
    ]
    worst = max(blocked)
    first = beats[0][0]
    longest = [f"{d * 1000:.0f} ms at {(t - first) * 1000:.0f} ms: {r}" for d, t, r in sorted(callbacks)[-3:]]
    assert worst[0] <= BOUND, (
        f"the loop was blocked {worst[0] * 1000:.0f} ms (beat lag {worst[1] * 1000:.0f} ms, "
        f"{(worst[2] - first) * 1000:.0f} ms after the start); max beat lag "
        f"{max(lag for lag, _, _ in lags) * 1000:.0f} ms over {len(beats)} beats; the longest "
        f"callbacks: {longest}"
    )
    assert opened_on and loop_thread not in opened_on, "the store was opened on the event loop"
    print(
        f"loop probe: blocked at most {worst[0] * 1000:.1f} ms; max beat lag "
        f"{max(lag for lag, _, _ in lags) * 1000:.1f} ms, first beat after the start "
        f"{lags[1][0] * 1000:.1f} ms; {len(beats)} beats"
    )
