"""Append throughput: 10,000 events saved one agent step at a time on SQLite.

The library path appends each event to a :class:`Session` (validation and the surface fold) and
calls :meth:`SessionStore.save` once per agent step. The baseline inserts the same encoded rows
(same bytes, same table shape, WAL) with raw ``sqlite3``, one transaction per step as well.

The two run *paired*: every step is saved by the library and then by the baseline, each timed on
its own, so both see the same disk (commit fsync dominates and varies a lot on a shared machine).
Ratio = raw seconds / library seconds (the library's share of raw throughput); the median of three
runs is reported. After each run the baseline's rows are checked byte for byte against the rows the
library stored.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script (scripts/bench.sh): the repository root first
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import raw_sqlite
from benchmarks.common import Result, fmt_seconds, scratch_dir
from benchmarks.workload import agent_batches
from compaction.sessions.mapper import encode_event
from compaction.sessions.store import SessionStore

EVENTS = 10_000
REPEAT = 3
TARGET = 0.5


def _paired_run(tmp: Path, attempt: int) -> tuple[float, float]:
    """Seconds spent by the library and by raw sqlite3 on the same steps, interleaved."""
    batches = list(agent_batches(EVENTS))
    library_db, raw_db = tmp / f"library-{attempt}.db", tmp / f"raw-{attempt}.db"
    library = raw = 0.0
    connection = raw_sqlite.connect(raw_db)
    try:
        with SessionStore.open(f"sqlite:///{library_db}") as store:
            session = store.create()
            gc.collect()
            for batch in batches:
                first = len(session)
                start = time.perf_counter()
                for event in batch:
                    session.append(event)
                store.save(session)
                library += time.perf_counter() - start
                rows = [(session.id.hex, e.seq, e.TYPE, encode_event(e)) for e in session.events(first)]
                start = time.perf_counter()
                raw_sqlite.insert_batches(connection, [rows])
                raw += time.perf_counter() - start
    finally:
        connection.close()
    if raw_sqlite.stored_rows(raw_db) != raw_sqlite.stored_rows(library_db):
        raise AssertionError("the baseline did not insert the rows the library stored")
    return library, raw


def run() -> list[Result]:
    transactions = sum(1 for _ in agent_batches(EVENTS))
    with scratch_dir("append") as tmp:
        runs = [_paired_run(tmp, attempt) for attempt in range(REPEAT)]
    library, raw = sorted(runs, key=lambda r: r[1] / r[0])[len(runs) // 2]
    ratios = ", ".join(f"{r / lib:.2f}" for lib, r in runs)
    return [
        Result(
            name=f"append {EVENTS:,} events, {transactions:,} saves (SQLite)",
            measured=f"{fmt_seconds(library)} ({EVENTS / library:,.0f} events/s)",
            baseline=f"raw sqlite3 {fmt_seconds(raw)} ({EVENTS / raw:,.0f} events/s); "
            f"ratios of the {REPEAT} runs: {ratios}",
            ratio=statistics.median(r / lib for lib, r in runs),
            target=TARGET,
            higher_is_better=True,
        )
    ]


if __name__ == "__main__":
    from benchmarks.run import main

    sys.exit(main(["append"]))
