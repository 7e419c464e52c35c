"""Load cost: a 100,000-event session read back from SQLite.

1. Full replay (no snapshots): :meth:`SessionStore.get` against raw ``sqlite3`` selecting the same
   rows and msgspec-decoding each into its typed event. Ratio = raw seconds / library seconds.
2. Latest state with snapshots every 1,000 events: loading the 100,000-event session against
   loading a 1,000-event session from the same store. Ratio = large / small (a cost ratio). Both
   sessions compact their surface every 20 turns, as a long-running agent does, so the state a
   snapshot holds stays bounded. The same figure for a session that never compacts (its surface,
   and so its snapshot, grows with the log: 39,131 nodes at 100,000 events) has the same target:
   the snapshot's surface is restored as packed arrays, one copy of its bytes.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script (scripts/bench.sh): the repository root first
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from uuid import UUID

from benchmarks import raw_sqlite
from benchmarks.common import Result, best_of, fmt_seconds, scratch_dir, timed
from benchmarks.workload import agent_batches, compacted_batches
from compaction.sessions.store import SessionStore

LARGE = 100_000
SMALL = 1_000
SNAPSHOT_INTERVAL = 1_000
SAVE_EVERY = 5_000  # events per save while building the fixture (building is not measured)
REPEAT = 3
REPEAT_SNAPSHOT = 20
REPLAY_TARGET = 0.3
SNAPSHOT_TARGET = 2.0


def build(store: SessionStore, total: int, *, compacted: bool = False) -> UUID:
    """Write one ``total``-event session, saving every few thousand events."""
    session = store.create()
    batches = compacted_batches(session, total) if compacted else agent_batches(total)
    for batch in batches:
        for event in batch:
            session.append(event)
        if len(session) - session.saved_length >= SAVE_EVERY:
            store.save(session)
    store.save(session)
    return session.id


def _replay(path: Path) -> Result:
    with SessionStore.open(f"sqlite:///{path}", snapshot_interval=0) as store:
        session_id = build(store, LARGE)
        library = best_of(REPEAT, lambda: timed(lambda: store.get(session_id, use_snapshots=False)))
    connection = raw_sqlite.connect(path)
    try:
        raw = best_of(REPEAT, lambda: timed(lambda: raw_sqlite.select_and_decode(connection, session_id.hex)))
    finally:
        connection.close()
    return Result(
        name=f"load {LARGE:,} events, full replay (SQLite)",
        measured=f"{fmt_seconds(library)} ({LARGE / library:,.0f} events/s)",
        baseline=f"raw select + decode {fmt_seconds(raw)}",
        ratio=raw / library,
        target=REPLAY_TARGET,
        higher_is_better=True,
    )


def _snapshots(path: Path, *, compacted: bool) -> Result:
    with SessionStore.open(f"sqlite:///{path}", snapshot_interval=SNAPSHOT_INTERVAL) as store:
        large_id = build(store, LARGE, compacted=compacted)
        small_id = build(store, SMALL, compacted=compacted)
        large = best_of(REPEAT_SNAPSHOT, lambda: timed(lambda: store.get(large_id)))
        small = best_of(REPEAT_SNAPSHOT, lambda: timed(lambda: store.get(small_id)))
        nodes = len(store.get(large_id).nodes)
    kind = "compacting" if compacted else "never compacted"
    return Result(
        name=f"load latest state via snapshots, {kind} ({LARGE:,} vs {SMALL:,} events, {nodes:,} nodes)",
        measured=f"{fmt_seconds(large)}",
        baseline=f"{SMALL:,}-event session {fmt_seconds(small)}",
        ratio=large / small,
        target=SNAPSHOT_TARGET,
        higher_is_better=False,
    )


def run() -> list[Result]:
    with scratch_dir("load") as tmp:
        return [
            _replay(tmp / "replay.db"),
            _snapshots(tmp / "compacting.db", compacted=True),
            _snapshots(tmp / "growing.db", compacted=False),
        ]


if __name__ == "__main__":
    from benchmarks.run import main

    sys.exit(main(["load"]))
