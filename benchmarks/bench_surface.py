"""Surface fold cost against log length: appending stays O(1) as the session grows.

An in-memory :class:`Session` is grown with the tool-heavy workload (no compaction, so the surface
grows with the log). Around the 1,000th and the 100,000th event, consecutive windows of appends are
timed; the figure is the best window's mean per append. Ratio = mean at 100,000 / mean at 1,000.
"""

from __future__ import annotations

import gc
import time

from benchmarks.common import Result, fmt_seconds
from benchmarks.workload import agent_events
from sessions.events import SessionEvent
from sessions.session import Session

SMALL = 1_000
LARGE = 100_000
WINDOW = 100  # appends per timed window
ROUNDS = 5  # consecutive windows centred on each size
TARGET = 1.5


def _grown(events: list[SessionEvent], size: int) -> Session:
    session = Session()
    for event in events[:size]:
        session.append(event)
    return session


def _mean_append(events: list[SessionEvent], size: int) -> float:
    """Best mean cost per append over ROUNDS consecutive windows centred on event ``size``."""
    first = size - WINDOW * ROUNDS // 2
    session = _grown(events, first)
    best = float("inf")
    for round_ in range(ROUNDS):
        window = events[first + round_ * WINDOW : first + (round_ + 1) * WINDOW]
        gc.collect()
        start = time.perf_counter()
        for event in window:
            session.append(event)
        best = min(best, (time.perf_counter() - start) / WINDOW)
    return best


def run() -> list[Result]:
    events = agent_events(LARGE + WINDOW * ROUNDS)
    _mean_append(events, SMALL)  # warm up the interpreter's caches
    small = _mean_append(events, SMALL)
    large = _mean_append(events, LARGE)
    surface = len(_grown(events, LARGE).nodes)
    return [
        Result(
            name=f"surface fold: append at {LARGE:,} vs {SMALL:,} events ({surface:,} nodes)",
            measured=f"{fmt_seconds(large)} per append",
            baseline=f"{fmt_seconds(small)} per append at {SMALL:,}",
            ratio=large / small,
            target=TARGET,
            higher_is_better=False,
        )
    ]
