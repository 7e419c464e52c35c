"""Surface fold cost against log length: appending stays O(1) as the session grows.

An in-memory :class:`Session` is grown with the tool-heavy workload (no compaction, so the surface
grows with the log). Around the 1,000th and the 100,000th event, consecutive windows of appends are
timed, alternating between the two sessions; the figure is the best window's mean per append.
Ratio = mean at 100,000 / mean at 1,000.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script (scripts/bench.sh): the repository root first
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gc
import time

from benchmarks.common import Result, fmt_seconds
from benchmarks.workload import agent_events
from compaction.sessions.events import SessionEvent
from compaction.sessions.session import Session

SMALL = 1_000
LARGE = 100_000
WINDOW = 100  # appends per timed window
ROUNDS = 9  # windows per size, centred on it; the two sizes alternate so both see the same noise
TARGET = 1.5


def _grown(events: list[SessionEvent], size: int) -> Session:
    session = Session()
    for event in events[:size]:
        session.append(event)
    return session


def _window(session: Session, events: list[SessionEvent]) -> float:
    """Mean seconds per append of ``events`` (the next events of ``session``)."""
    gc.collect()
    start = time.perf_counter()
    for event in events:
        session.append(event)
    return (time.perf_counter() - start) / len(events)


def _best_means(events: list[SessionEvent], sizes: tuple[int, ...]) -> list[float]:
    """Best window mean around each size, windows of the sizes interleaved round by round."""
    firsts = [size - WINDOW * ROUNDS // 2 for size in sizes]
    sessions = [_grown(events, first) for first in firsts]
    best = [float("inf")] * len(sizes)
    for round_ in range(ROUNDS):
        for k, (session, first) in enumerate(zip(sessions, firsts, strict=True)):
            lo = first + round_ * WINDOW
            best[k] = min(best[k], _window(session, events[lo : lo + WINDOW]))
    return best


def run() -> list[Result]:
    events = agent_events(LARGE + WINDOW * ROUNDS)
    _best_means(events, (SMALL,))  # warm up the interpreter's caches
    small, large = _best_means(events, (SMALL, LARGE))
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


if __name__ == "__main__":
    from benchmarks.run import main

    sys.exit(main(["surface"]))
