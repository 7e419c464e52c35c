"""Reads of whole sessions, window by window: the export and the copy of a session at 10,000 and at
100,000 events (SQLite).

Each read is measured twice: its wall time (untraced), and its peak memory with ``tracemalloc``
(what Python allocated during the read, at most; the session is built and stored before). The rows
are ratios of the large session to the small one: a read that holds the whole session peaks about
10x higher for 10x the events; a windowed one holds a window and the fold state (the surface's
packed seqs), so its peak barely moves, while its time grows with the events it reads (linearly:
about 10x). The sessions are the agent workload, compacting every 20 turns
(:func:`benchmarks.workload.compacted_batches`). An informational row compares the streamed
export's peak with the export of the loaded session (``export_lines(store.get(...))``, what the
command did before).

    .venv/bin/python -m benchmarks.run readers
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from uuid import UUID

from benchmarks.bench_load import build
from benchmarks.common import Discarded, Result, fmt_seconds, peak_bytes, scratch_dir, timed
from compaction.sessions.copy import copy_session
from compaction.sessions.native import StoredExport, export_lines
from compaction.sessions.store import SessionStore

SMALL = 10_000
LARGE = 100_000
MEMORY_TARGET = 3.0
"""Most a read's peak may grow for ten times the events."""
TIME_TARGET = 13.0
"""Most a read's time may grow for ten times the events (linear: about 10)."""


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def _rows(what: str, small: tuple[float, int], large: tuple[float, int]) -> list[Result]:
    sizes = f"{LARGE:,} vs {SMALL:,} events (SQLite)"
    return [
        Result(
            name=f"{what}, peak memory: {sizes}",
            measured=_megabytes(large[1]),
            baseline=f"{SMALL:,} events {_megabytes(small[1])}",
            ratio=large[1] / small[1],
            target=MEMORY_TARGET,
            higher_is_better=False,
        ),
        Result(
            name=f"{what}, time: {sizes}",
            measured=fmt_seconds(large[0]),
            baseline=f"{SMALL:,} events {fmt_seconds(small[0])}",
            ratio=large[0] / small[0],
            target=TIME_TARGET,
            higher_is_better=False,
        ),
    ]


def _export(store: SessionStore, session_id: UUID) -> tuple[float, int]:
    def export() -> None:
        StoredExport.of(store, session_id).write(Discarded())

    return timed(export), peak_bytes(export)


def _copy(store: SessionStore, session_id: UUID, folder: Path) -> tuple[float, int]:
    targets = iter(range(2))

    def copy() -> None:
        with SessionStore.open(f"sqlite:///{folder / f'copy-{session_id}-{next(targets)}.db'}") as target:
            report = copy_session(store, target, session_id)
        assert report.verified, report.detail

    return timed(copy), peak_bytes(copy)


def run() -> list[Result]:
    with scratch_dir("readers") as folder, SessionStore.open(f"sqlite:///{folder / 'source.db'}") as store:
        small, large = build(store, SMALL, compacted=True), build(store, LARGE, compacted=True)
        exports = _export(store, small), _export(store, large)
        copies = _copy(store, small, folder), _copy(store, large, folder)
        whole = peak_bytes(lambda: sum(1 for _ in export_lines(store.get(large))))
    return [
        *_rows("export", *exports),
        *_rows("copy", *copies),
        Result(
            name=f"export, peak memory: streamed vs the loaded session's export ({LARGE:,} events)",
            measured=_megabytes(exports[1][1]),
            baseline=f"export_lines(store.get()) {_megabytes(whole)}",
            ratio=exports[1][1] / whole,
            target=None,
            higher_is_better=False,
        ),
    ]


if __name__ == "__main__":
    from benchmarks.run import table

    print(table(run()))
