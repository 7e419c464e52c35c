"""Compaction costs, as ratios measured in the same run.

1. The pressure check with nothing to compact must be incremental: at a 100,000-event session it
   may cost no more than 1.5x what it costs at 1,000 events. The sessions are the tool-heavy
   workload (never compacted, so the 100,000-event surface holds ~39,000 nodes); the meter is warm
   (it priced the session once), then one agent step is appended and the check is timed, repeated
   for a few hundred steps; the median is compared. Two rows: ``HeuristicMeter.measure`` alone, and
   the whole ``BasicCompactService.compact_if_needed`` below the threshold (window, lock scan,
   measure).
2. One compaction of the largest public transcript (by events after import) with the template
   summarizer, committed to SQLite (``compact_now``: lock, summary, fidelity gate, atomic commit),
   against loading that session from the same store (``SessionStore.get``). Reported, no target.

    .venv/bin/python -m benchmarks.bench_compaction
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_fidelity import copy_of, imported_sessions
from benchmarks.common import Result, best_of, fmt_seconds, scratch_dir, timed
from benchmarks.workload import agent_batches
from compaction.engine.meters import HeuristicMeter
from compaction.service import BasicCompactService
from compaction.sessions.events import SessionEvent
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.contract import CompactionResult

SMALL = 1_000
LARGE = 100_000
CHECKS = 100  # timed checks of each kind per size and round (one agent step appended before each)
ROUNDS = 3
COLD = 3
PRESSURE_TARGET = 1.5
REPEAT = 5
T = TypeVar("T")


# ---------------------------------------------------------------- the pressure check


def batches_after(total: int) -> tuple[Session, Iterator[list[SessionEvent]]]:
    """A session of ``total`` events (whole agent steps), and the steps that follow."""
    session = Session()
    stream = iter(list(agent_batches(total + CHECKS * 20)))
    for batch in stream:
        for event in batch:
            session.append(event)
        if len(session) >= total:
            break
    return session, stream


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Drive a coroutine that never suspends (a check below the threshold awaits nothing)."""
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    coroutine.close()
    raise RuntimeError("the pressure check suspended: it was not below the threshold")


def timed_call(action: Callable[[], object]) -> float:
    """Seconds of one call with the garbage collector paused (as ``timeit`` does)."""
    gc.disable()
    try:
        started = time.perf_counter()
        action()
        return time.perf_counter() - started
    finally:
        gc.enable()


@dataclass
class Probe:
    """One session under test: its meter, its service, the steps still to append, the timings."""

    session: Session
    steps: Iterator[list[SessionEvent]]
    meter: HeuristicMeter = field(default_factory=HeuristicMeter)
    measures: list[float] = field(default_factory=list)
    checks: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.service = BasicCompactService(BasicConfig(context_window=10**9), meter=self.meter)
        self.meter.measure(self.session)  # warm: every node priced once

    def step(self) -> None:
        for event in next(self.steps):
            self.session.append(event)

    def probe(self) -> None:
        """Append a step and time ``measure``; append another and time the whole check."""
        self.step()
        self.measures.append(timed_call(lambda: self.meter.measure(self.session)))
        self.step()
        self.checks.append(timed_call(lambda: run_sync(self.service.compact_if_needed(self.session))))


def one_round() -> tuple[Probe, Probe]:
    """Both sizes probed in alternation, so a noisy moment hits both alike."""
    small, large = Probe(*batches_after(SMALL)), Probe(*batches_after(LARGE))
    for _ in range(CHECKS):
        small.probe()
        large.probe()
    return small, large


def cold_measure(session: Session) -> float:
    """A fresh meter prices every node: what a non-incremental check would cost (the prices an
    earlier meter published on the session are forgotten first, or it would start from them)."""

    def once() -> float:
        session.price_columns.clear()
        return timed(lambda: HeuristicMeter().measure(session))

    return best_of(COLD, once)


def pressure() -> list[Result]:
    rounds = [one_round() for _ in range(ROUNDS)]
    best = {
        kind: [min(statistics.median(getattr(pair[i], kind)) for pair in rounds) for i in (0, 1)]
        for kind in ("measures", "checks")
    }
    nodes = len(rounds[0][1].session.nodes)
    grown = f"(+{CHECKS * 2} agent steps while timing; best of {ROUNDS} rounds)"
    rows = [
        ("measures", "HeuristicMeter.measure after one step", f" ({nodes:,} nodes)"),
        ("checks", "compact_if_needed below the threshold", ""),
    ]
    small, large = rounds[-1]
    cold = [cold_measure(small.session), cold_measure(large.session)]
    return [
        *(
            Result(
                name=f"pressure check, {what}, {LARGE:,}-event session{extra} {grown}",
                measured=fmt_seconds(best[kind][1]),
                baseline=f"{SMALL:,}-event session {fmt_seconds(best[kind][0])}",
                ratio=best[kind][1] / best[kind][0],
                target=PRESSURE_TARGET,
                higher_is_better=False,
            )
            for kind, what, extra in rows
        ),
        Result(
            name="for comparison, a cold meter (prices the whole surface on every check)",
            measured=fmt_seconds(cold[1]),
            baseline=f"{SMALL:,}-event session {fmt_seconds(cold[0])}",
            ratio=cold[1] / cold[0],
            target=None,
            higher_is_better=False,
        ),
    ]


# ---------------------------------------------------------------- one compaction vs one load


def largest_transcript() -> tuple[str, Session]:
    return max(imported_sessions(), key=lambda item: len(item[1]))


def compaction_against_load() -> Result:
    name, session = largest_transcript()
    service = BasicCompactService()
    with scratch_dir("compaction") as tmp, SessionStore.open(f"sqlite:///{tmp / 'c.db'}") as store:
        copies = [copy_of(session) for _ in range(REPEAT)]
        for copy in copies:
            store.save(copy)
        load = best_of(REPEAT, lambda: timed(lambda: store.get(copies[0].id)))
        replay = best_of(REPEAT, lambda: timed(lambda: store.get(copies[0].id, use_snapshots=False)))
        costs: list[float] = []
        shadowed = 0
        for copy in copies:
            loaded = store.get(copy.id)
            results: list[CompactionResult] = []
            costs.append(timed(one_compaction(service, loaded, store, results)))
            shadowed = len(results[0].shadowed_seqs)
        compact = min(costs)
    return Result(
        name=f"one compaction of {name} ({len(session):,} events, {shadowed} nodes shadowed), "
        "template summarizer, SQLite",
        measured=fmt_seconds(compact),
        baseline=f"loading that session {fmt_seconds(load)} (full replay without snapshots "
        f"{fmt_seconds(replay)})",
        ratio=compact / load,
        target=None,
        higher_is_better=False,
    )


def one_compaction(
    service: BasicCompactService, session: Session, store: SessionStore, out: list[Any]
) -> Callable[[], None]:
    def act() -> None:
        result = asyncio.run(service.compact_now(session, store=store))
        assert result is not None
        out.append(result)

    return act


def run() -> list[Result]:
    return [*pressure(), compaction_against_load()]


def main(argv: list[str] | None = None) -> int:
    from benchmarks.run import table

    results = run()
    print(table(results))
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
