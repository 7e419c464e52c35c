"""Append throughput: 10,000 events saved one agent step at a time on SQLite.

The library path appends each event to a :class:`Session` (validation and the surface fold) and
calls :meth:`SessionStore.save` once per agent step. The baseline inserts the very rows the library
stored (same bytes, same table shape, WAL) with raw ``sqlite3``, in the same number of transactions.
Ratio = raw seconds / library seconds (the library's share of raw throughput).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script (scripts/bench.sh): the repository root first
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


from benchmarks import raw_sqlite
from benchmarks.common import Result, fmt_seconds, scratch_dir, timed
from benchmarks.workload import agent_batches
from sessions.store import SessionStore

EVENTS = 10_000
REPEAT = 3
TARGET = 0.5


def _library(path: Path) -> float:
    batches = list(agent_batches(EVENTS))
    with SessionStore.open(f"sqlite:///{path}") as store:

        def write() -> None:
            session = store.create()
            for batch in batches:
                for event in batch:
                    session.append(event)
                store.save(session)

        return timed(write)


def _raw(path: Path, batches: list[list[raw_sqlite.Row]]) -> float:
    connection = raw_sqlite.connect(path)
    try:
        return timed(lambda: raw_sqlite.insert_batches(connection, batches))
    finally:
        connection.close()


def _batches_like_library(rows: list[raw_sqlite.Row]) -> list[list[raw_sqlite.Row]]:
    sizes = [len(batch) for batch in agent_batches(EVENTS)]
    batches, start = [], 0
    for size in sizes:
        batches.append(rows[start : start + size])
        start += size
    return batches


def run() -> list[Result]:
    library_times, raw_times = [], []
    transactions = sum(1 for _ in agent_batches(EVENTS))
    with scratch_dir("append") as tmp:
        for attempt in range(REPEAT):
            library_db = tmp / f"library-{attempt}.db"
            library_times.append(_library(library_db))
            rows = raw_sqlite.stored_rows(library_db)
            raw_times.append(_raw(tmp / f"raw-{attempt}.db", _batches_like_library(rows)))
    library, raw = min(library_times), min(raw_times)
    per_event = f"{EVENTS / library:,.0f} events/s"
    return [
        Result(
            name=f"append {EVENTS:,} events, {transactions:,} saves (SQLite)",
            measured=f"{fmt_seconds(library)} ({per_event})",
            baseline=f"raw sqlite3 {fmt_seconds(raw)} ({EVENTS / raw:,.0f} events/s)",
            ratio=raw / library,
            target=TARGET,
            higher_is_better=True,
        )
    ]


if __name__ == "__main__":
    from benchmarks.run import main

    sys.exit(main(["append"]))
