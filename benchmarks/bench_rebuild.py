"""Rebuild of the surface view over 100,000 events, against the raw driver doing the same work.

The store holds 10 compacting sessions of 10,000 events (the tool-heavy workload, a whole-surface
compaction every 20 turns). The library figure is ``ProjectionRunner(store, ["surface"]).rebuild()``:
drop the view, read the notification log in batches, decode every event, fold it with the
aggregate's surface, write the view rows and tracking record per batch. The baseline reads the same
stored rows with the raw driver in one query, decodes each with msgspec into its typed event, and
writes one view row per surface event in one transaction (SQLite: ``sqlite3`` into a fresh file;
PostgreSQL: ``psycopg`` ``executemany`` into a fresh table). Ratio = raw seconds / library seconds;
best of three alternating runs each. Target: at least 0.3 on both backends.

Run it alone with ``python -m benchmarks.bench_rebuild`` (or ``python benchmarks/bench_rebuild.py``);
``run()`` returns the figures for ``benchmarks.run``. PostgreSQL is used when it answers at
``$COMPACTION_BENCH_PG`` (default ``postgresql://postgres@127.0.0.1:5432``), otherwise its figure is
reported as skipped.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgspec

from benchmarks.bench_load import build
from benchmarks.common import Result, fmt_seconds, scratch_dir, timed
from compaction.sessions.events import SessionEvent, event_class
from compaction.sessions.store import SessionStore
from projections import ProjectionRunner

SESSIONS = 10
EVENTS_PER_SESSION = 10_000
EVENTS = SESSIONS * EVENTS_PER_SESSION
REPEAT = 3
TARGET = 0.3
PG_BASE = os.environ.get("COMPACTION_BENCH_PG", "postgresql://postgres@127.0.0.1:5432")


def fill(store: SessionStore) -> None:
    for _ in range(SESSIONS):
        build(store, EVENTS_PER_SESSION, compacted=True)


def _decode_surface_rows(rows: list[tuple[Any, ...]]) -> list[tuple[str, int]]:
    """msgspec-decode every stored row; keep ``(session, seq)`` of the surface events."""
    decoders: dict[str, msgspec.json.Decoder[Any]] = {}
    out: list[tuple[str, int]] = []
    for originator_id, version, topic, state in rows:
        decoder = decoders.get(topic)
        if decoder is None:
            decoder = decoders[topic] = msgspec.json.Decoder(event_class(topic))
        event: SessionEvent = decoder.decode(state)
        if event.SURFACE:
            out.append((str(originator_id), version))
    return out


def _library(store: SessionStore) -> Callable[[], float]:
    def run() -> float:
        with ProjectionRunner(store, ["surface"]) as runner:  # opening the views is not timed
            return timed(runner.rebuild)

    return run


# ---------------------------------------------------------------- SQLite


def _raw_sqlite(store_path: Path, view_path: Path) -> float:
    for leftover in (view_path, Path(f"{view_path}-wal"), Path(f"{view_path}-shm")):
        leftover.unlink(missing_ok=True)
    connections: list[sqlite3.Connection] = []

    def work() -> None:
        source = sqlite3.connect(store_path, isolation_level=None)
        view = sqlite3.connect(view_path, isolation_level=None)
        connections.extend((source, view))
        rows = source.execute(
            "SELECT originator_id, originator_version, topic, state FROM stored_events ORDER BY rowid"
        ).fetchall()
        view_rows = _decode_surface_rows(rows)
        # The same journal and sync settings as the library's views file.
        view.execute("PRAGMA journal_mode=WAL")
        view.execute("PRAGMA synchronous=NORMAL")
        view.execute("CREATE TABLE surface (session_id TEXT, seq INTEGER, PRIMARY KEY (session_id, seq))")
        view.execute("BEGIN")
        view.executemany("INSERT INTO surface VALUES (?, ?)", view_rows)
        view.execute("COMMIT")

    seconds = timed(work)
    for connection in connections:  # closing checkpoints the WAL: not part of the work
        connection.close()
    return seconds


def _sqlite(tmp: Path) -> Result:
    path = tmp / "sessions.db"
    with SessionStore.open(f"sqlite:///{path}") as store:
        fill(store)
        library, raw = [], []
        for _ in range(REPEAT):
            library.append(_library(store)())
            raw.append(_raw_sqlite(path, tmp / "raw-view.db"))
    return _result("SQLite", min(library), min(raw))


# ---------------------------------------------------------------- PostgreSQL


@contextmanager
def _pg_database() -> Iterator[str | None]:
    """A scratch database URL, or None when PostgreSQL does not answer."""
    import psycopg

    name = f"bench_rebuild_{uuid.uuid4().hex[:10]}"
    try:
        admin = psycopg.connect(f"{PG_BASE}/postgres", autocommit=True, connect_timeout=3)
    except psycopg.Error:
        yield None
        return
    try:
        admin.execute(f'CREATE DATABASE "{name}"')
        yield f"{PG_BASE}/{name}"
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def _raw_postgres(url: str) -> float:
    import psycopg

    with psycopg.connect(url) as conn:

        def work() -> None:
            rows = conn.execute(
                "SELECT originator_id, originator_version, topic, state FROM sessionstore_events "
                "ORDER BY notification_id"
            ).fetchall()
            view_rows = _decode_surface_rows([(i, v, t, bytes(s)) for i, v, t, s in rows])
            conn.execute("DROP TABLE IF EXISTS raw_surface")
            conn.execute(
                "CREATE TABLE raw_surface (session_id text, seq bigint, PRIMARY KEY (session_id, seq))"
            )
            with conn.cursor() as cursor:
                cursor.executemany("INSERT INTO raw_surface VALUES (%s, %s)", view_rows)
            conn.commit()

        return timed(work)


def _postgres() -> Result | None:
    with _pg_database() as url:
        if url is None:
            return None
        with SessionStore.open(url) as store:
            fill(store)
            library, raw = [], []
            for _ in range(REPEAT):
                library.append(_library(store)())
                raw.append(_raw_postgres(url))
        return _result("PostgreSQL", min(library), min(raw))


# ---------------------------------------------------------------- report


def _result(backend: str, library: float, raw: float) -> Result:
    driver = "sqlite3" if backend == "SQLite" else "psycopg"
    return Result(
        name=f"rebuild the surface view over {EVENTS:,} events ({backend})",
        measured=f"{fmt_seconds(library)} ({EVENTS / library:,.0f} events/s)",
        baseline=f"raw {driver} read + decode + write {fmt_seconds(raw)}",
        ratio=raw / library,
        target=TARGET,
        higher_is_better=True,
    )


def run() -> list[Result]:
    with scratch_dir("rebuild") as tmp:
        results = [_sqlite(tmp)]
    postgres = _postgres()
    if postgres is not None:
        results.append(postgres)
    return results


def main() -> int:
    """Print each figure with its ratio; exit status 1 when one misses its target."""
    results = run()
    for result in results:
        verdict = "ok" if result.passed else "MISSED"
        print(
            f"{result.name}: {result.measured}; baseline {result.baseline}; ratio "
            f"{result.ratio:.2f} (target {result.target_text}) {verdict}"
        )
    if len(results) == 1:
        print(f"PostgreSQL skipped: no server at {PG_BASE}")
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
