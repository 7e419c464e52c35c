"""Recovery scan over 1,000 sessions: events scanned per second, and the ratio to a rebuild.

The store (SQLite) holds 1,000 sessions of 200 events each of the tool-heavy workload, compacting
every two turns (so the log holds complete ``compact/*`` brackets); 10 of them end in an orphaned
``compact/start`` whose lease has expired. One recovery pass (:func:`recovery.recover`, report
only) scans the whole notification log for lock records and proves every orphan inert.

Baseline: the rebuild benchmark (``bench_rebuild``) is not in the tree yet, so the baseline is a raw
rebuild of the same events: every notification read and msgspec-decoded, and each session's surface
folded from scratch with :class:`compaction.sessions.surface.Surface`. Ratio = recovery events/s / rebuild
events/s (higher is better; the scan must be no slower than a rebuild).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.common import Result, best_of, fmt_seconds, scratch_dir, timed
from benchmarks.workload import compacted_batches
from compaction.sessions.events import SessionEvent
from compaction.sessions.store import SessionStore
from compaction.sessions.surface import Surface
from compaction.vocabulary.events import CompactStart, Lease
from recovery import RecoveryConfig, RecoveryReport, recover

SESSIONS = 1_000
EVENTS = 200  # per session
ORPHANS = 10
REPEAT = 3
TARGET = 1.0
EXPIRED = Lease(host="bench-worker", pid=1, expires_at=datetime(2001, 1, 1, tzinfo=UTC))


def build(store: SessionStore) -> int:
    """Write the sessions; return the number of events stored."""
    total = 0
    for index in range(SESSIONS):
        session = store.create()
        for batch in compacted_batches(session, EVENTS, every_turns=2):
            for event in batch:
                session.append(event)
        if index < ORPHANS:
            session.append(CompactStart(compaction_id=f"orphan-{index}", turn=None, lease=EXPIRED))
        store.save(session)
        total += len(session)
    return total


def rebuild(store: SessionStore) -> int:
    """Read and decode every event, fold every session's surface; return the events folded."""
    surfaces: dict[object, Surface] = defaultdict(Surface)
    logs: dict[object, dict[int, SessionEvent]] = defaultdict(dict)
    after, folded = 0, 0
    while True:
        batch = store.notifications(after, 5000)
        if not batch:
            return folded
        for notification in batch:
            event = notification.event
            log = logs[notification.session_id]
            log[event.seq] = event
            surfaces[notification.session_id].fold(event, log.__getitem__)
            folded += 1
        after = batch[-1].notification_id


def _scan(path: Path) -> Result:
    url = f"sqlite:///{path}"
    config = RecoveryConfig(check_pids=False)
    with SessionStore.open(url) as store:
        total = build(store)
        reports: list[RecoveryReport] = []
        scan = best_of(REPEAT, lambda: timed(lambda: reports.append(recover(store, config))))
        folded: list[int] = []
        baseline = best_of(REPEAT, lambda: timed(lambda: folded.append(rebuild(store))))
    report = reports[-1]
    assert report.events_scanned == total == folded[-1], (report.events_scanned, total, folded)
    assert len(report.orphans) == ORPHANS and all(o.inert and o.stale for o in report.orphans)
    return Result(
        name=f"recovery scan, {SESSIONS:,} sessions / {total:,} events, {ORPHANS} orphans (SQLite)",
        measured=f"{fmt_seconds(scan)} ({total / scan:,.0f} events/s, {report.records_read:,} "
        "lock records read)",
        baseline=f"raw rebuild fold {fmt_seconds(baseline)} ({total / baseline:,.0f} events/s)",
        ratio=baseline / scan,
        target=TARGET,
        higher_is_better=True,
    )


def run() -> list[Result]:
    with scratch_dir("recovery") as tmp:
        return [_scan(tmp / "recovery.db")]


def main() -> None:
    for result in run():
        verdict = "ok" if result.passed else "BELOW TARGET"
        print(
            f"{result.name}\n  measured: {result.measured}\n  baseline: {result.baseline}\n"
            f"  ratio: {result.ratio:.2f} (target {result.target_text}) {verdict}"
        )


if __name__ == "__main__":
    main()
