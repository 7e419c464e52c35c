"""Crash tests: a real child process compacts a session on a real store and is SIGKILLed at each
point of the transaction; recovery then finds exactly the expected orphans, proves them inert,
repairs them, and the session compacts again. Runs on SQLite and PostgreSQL (``durable_store_url``).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from uuid import UUID

import pytest

from compaction.engine.lock import inspect_lock
from compaction.service import BasicCompactService
from compaction.sessions.events import SessionEvent, SessionResume, TurnEnd, UserMessage
from compaction.sessions.store import SessionStore
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.events import CompactEnd, CompactStart, CompactSummary
from recovery import RecoveryConfig, RecoveryReport, recover, surface_hash
from tests.builders import end_turn, start_turn, tool_step, user, wait_until

CHILD = Path(__file__).with_name("crash_child.py")
WINDOW = 3000
MARKER_TIMEOUT = 60.0


@dataclass
class Child:
    process: subprocess.Popen[bytes]
    marker: Path
    outcome: Path
    stderr: Path

    def errors(self) -> str:
        return self.stderr.read_text() if self.stderr.exists() else ""

    def wait_for_marker(self) -> None:
        """Until the child writes its marker; fail if it exits first (the fixture kills it)."""
        wait_until(
            lambda: self.marker.exists() or self.process.poll() is not None,
            MARKER_TIMEOUT,
            f"the child's marker {self.marker.name}",
        )
        if not self.marker.exists():
            pytest.fail(f"child exited ({self.process.returncode}) before the marker:\n{self.errors()}")

    def kill(self) -> None:
        """SIGKILL, then reap (an unreaped child is a zombie and still answers kill(pid, 0))."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        assert self.process.returncode == -signal.SIGKILL


@pytest.fixture
def children() -> Iterator[list[Child]]:
    started: list[Child] = []
    yield started
    for child in started:
        if child.process.poll() is None:
            child.kill()


def spawn(
    children: list[Child],
    url: str,
    session_id: UUID,
    stage: str,
    tmp: Path,
    *,
    go: Path | None = None,
) -> Child:
    marker, outcome = tmp / f"marker-{stage}", tmp / f"outcome-{stage}.json"
    command = [
        sys.executable,
        str(CHILD),
        "--store",
        url,
        "--session",
        str(session_id),
        "--stage",
        stage,
        "--marker",
        str(marker),
        "--window",
        str(WINDOW),
        "--outcome",
        str(outcome),
    ]
    if go is not None:
        command += ["--go", str(go)]
    stderr = tmp / f"stderr-{stage}.txt"
    with stderr.open("wb") as err:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err)
    child = Child(process, marker, outcome, stderr)
    children.append(child)
    return child


def seed_session(store: SessionStore) -> UUID:
    """A session whose open turn is over the compaction threshold of a WINDOW-token context."""
    session = store.create()
    user(session, "Please fix the failing tests in src/mod.py")
    start_turn(session, window=WINDOW)
    for _ in range(12):
        tool_step(session, 2, output="output line " * 30)
    store.save(session)
    return session.id


def events_of(store: SessionStore, session_id: UUID) -> list[SessionEvent]:
    return store.load_events(session_id)


def starts(events: list[SessionEvent]) -> list[CompactStart]:
    return [e for e in events if isinstance(e, CompactStart)]


def ends(events: list[SessionEvent], compaction_id: str) -> list[CompactEnd]:
    return [e for e in events if isinstance(e, CompactEnd) and e.compaction_id == compaction_id]


def repair_config(**kwargs: object) -> RecoveryConfig:
    return RecoveryConfig(repair=True, **kwargs)  # type: ignore[arg-type]


def assert_repaired_then_idle(store: SessionStore, session_id: UUID, report: RecoveryReport) -> None:
    """After a repair: the lock is free, and a second repair finds nothing and writes nothing."""
    assert [o.action for o in report.orphans] == ["repaired"]
    assert not inspect_lock(store.get(session_id)).live
    length = len(events_of(store, session_id))
    again = recover(store, repair_config())
    assert again.orphans == ()
    assert len(events_of(store, session_id)) == length


def compact_again(store: SessionStore, session_id: UUID) -> None:
    """The next compaction of the session succeeds and leaves a complete bracket."""
    session = store.get(session_id)
    assert session.open_turn is None
    result = asyncio.run(
        BasicCompactService(BasicConfig(context_window=WINDOW)).compact_now(session, store=store)
    )
    assert result is not None
    events = events_of(store, session_id)
    assert [e.error for e in ends(events, result.compaction_id)] == [None]
    assert recover(store, repair_config()).orphans == ()


# ---------------------------------------------------------------- SIGKILL at each point


@pytest.mark.parametrize("stage", ["started", "during-summary", "summarized", "before-commit"])
def test_sigkill_leaves_an_inert_orphan_that_recovery_repairs(
    durable_store_url: str, stage: str, tmp_path: Path, children: list[Child]
) -> None:
    with SessionStore.open(durable_store_url) as store:
        session_id = seed_session(store)
        before_hash = surface_hash(store.get(session_id))
        before_len = len(events_of(store, session_id))
        child = spawn(children, durable_store_url, session_id, stage, tmp_path)
        child.wait_for_marker()
        child.kill()

        events = events_of(store, session_id)
        assert len(events) == before_len + 1  # only the compact/start reached the log
        (start,) = starts(events)
        assert start.lease.pid == child.process.pid

        found = recover(store)  # report only
        (orphan,) = found.orphans
        assert (orphan.session_id, orphan.compaction_id, orphan.start_seq) == (
            str(session_id),
            start.compaction_id,
            start.seq,
        )
        assert orphan.stale and orphan.rule == "owner-gone"
        assert orphan.inert is True
        assert orphan.surface_hash == before_hash == surface_hash(store.get(session_id))
        assert orphan.action == "would-repair"
        assert len(events_of(store, session_id)) == before_len + 1  # a report writes nothing

        repaired = recover(store, repair_config())
        events = events_of(store, session_id)
        (end,) = ends(events, start.compaction_id)
        assert end.error is not None and end.error.startswith("abandoned: owner process")
        assert repaired.orphans[0].end_seq == end.seq
        closer = events[-1]  # the child owned the open turn: it is closed as interrupted
        assert isinstance(closer, TurnEnd) and closer.reason.kind == "interrupted"
        assert repaired.orphans[0].closer_seqs == (closer.seq,)
        assert not [e for e in events if isinstance(e, CompactSummary)]
        assert surface_hash(store.get(session_id)) == before_hash
        assert_repaired_then_idle(store, session_id, repaired)
        compact_again(store, session_id)


def test_sigkill_just_after_the_commit_leaves_no_orphan(
    durable_store_url: str, tmp_path: Path, children: list[Child]
) -> None:
    with SessionStore.open(durable_store_url) as store:
        session_id = seed_session(store)
        before_hash = surface_hash(store.get(session_id))
        child = spawn(children, durable_store_url, session_id, "committed", tmp_path)
        child.wait_for_marker()
        child.kill()

        events = events_of(store, session_id)
        (start,) = starts(events)
        summary, replacement, end = events[-3:]
        assert isinstance(summary, CompactSummary) and summary.compaction_id == start.compaction_id
        assert isinstance(replacement, UserMessage) and start.seq in (replacement.source_event_seqs or ())
        assert isinstance(end, CompactEnd) and end.compaction_id == start.compaction_id
        assert end.error is None
        report = recover(store, repair_config())
        assert report.orphans == ()
        assert report.events_scanned >= len(events)
        assert len(events_of(store, session_id)) == len(events)
        assert surface_hash(store.get(session_id)) != before_hash


# ---------------------------------------------------------------- the other staleness rules


def test_expired_lease_of_a_killed_worker_is_stale_without_pid_checks(
    durable_store_url: str, tmp_path: Path, children: list[Child]
) -> None:
    with SessionStore.open(durable_store_url) as store:
        session_id = seed_session(store)
        child = spawn(children, durable_store_url, session_id, "during-summary", tmp_path)
        child.wait_for_marker()
        child.kill()
        (start,) = starts(events_of(store, session_id))
        # Recovery reads the time from its clock: a second before the lease expires, then after.
        expires = start.lease.expires_at
        before = repair_config(check_pids=False, clock=lambda: expires - timedelta(seconds=1))
        early = recover(store, before)
        assert [(o.stale, o.rule, o.action) for o in early.orphans] == [(False, "live", "none")]
        after = repair_config(check_pids=False, clock=lambda: expires + timedelta(seconds=1))
        repaired = recover(store, after)
        assert [(o.stale, o.rule, o.inert) for o in repaired.orphans] == [(True, "lease-expired", True)]
        assert_repaired_then_idle(store, session_id, repaired)
        compact_again(store, session_id)


def test_later_session_resume_makes_the_orphan_stale(
    durable_store_url: str, tmp_path: Path, children: list[Child]
) -> None:
    with SessionStore.open(durable_store_url) as store:
        session_id = seed_session(store)
        child = spawn(children, durable_store_url, session_id, "started", tmp_path)
        child.wait_for_marker()
        child.kill()
        session = store.get(session_id)
        session.append(SessionResume(host="new-host", pid=1))  # a new lifecycle took over
        store.save(session)
        no_pids = repair_config(check_pids=False)
        repaired = recover(store, no_pids)
        (orphan,) = repaired.orphans
        assert (orphan.stale, orphan.rule, orphan.inert) == (True, "resume", True)
        assert orphan.closer_seqs == ()  # the open turn now belongs to the new lifecycle
        session = store.get(session_id)
        assert session.open_turn is not None
        assert_repaired_then_idle(store, session_id, repaired)
        end_turn(session)  # the new lifecycle finishes its turn
        store.save(session)
        compact_again(store, session_id)


# ---------------------------------------------------------------- a slow compaction loses its lease


def test_expired_lease_then_late_commit_fails_cleanly(
    durable_store_url: str, tmp_path: Path, children: list[Child]
) -> None:
    with SessionStore.open(durable_store_url) as store:
        session_id = seed_session(store)
        before_hash = surface_hash(store.get(session_id))
        go = tmp_path / "go"
        child = spawn(children, durable_store_url, session_id, "none", tmp_path, go=go)
        child.wait_for_marker()  # the child is summarizing, and alive
        (start,) = starts(events_of(store, session_id))
        expired = start.lease.expires_at + timedelta(seconds=1)  # recovery's clock, not a sleep

        repaired = recover(store, repair_config(clock=lambda: expired))
        (orphan,) = repaired.orphans
        assert (orphan.rule, orphan.inert, orphan.action) == ("lease-expired", True, "repaired")

        go.write_text("go")
        child.process.wait(timeout=60)
        assert child.process.returncode == 0, child.errors()
        outcome = json.loads(child.outcome.read_text())
        assert outcome["error"]["type"] == "CommitError"
        assert "closed by another process" in outcome["error"]["message"]

        events = events_of(store, session_id)
        assert [
            e.error is not None and e.error.startswith("abandoned: lease")
            for e in ends(events, start.compaction_id)
        ] == [True]
        assert not [e for e in events if isinstance(e, CompactSummary)]
        assert not [e for e in events if start.seq in (e.source_event_seqs or ())]
        assert surface_hash(store.get(session_id)) == before_hash
        assert recover(store, repair_config()).orphans == ()


def test_child_pid_is_reaped_before_recovery(tmp_path: Path, children: list[Child]) -> None:
    """Sanity of the harness itself: the killed child's pid is gone once reaped."""
    from recovery import process_alive

    with SessionStore.open(f"sqlite:///{tmp_path / 's.db'}") as store:
        session_id = seed_session(store)
    child = spawn(children, f"sqlite:///{tmp_path / 's.db'}", session_id, "started", tmp_path)
    child.wait_for_marker()
    assert process_alive(child.process.pid)
    child.kill()
    assert not process_alive(child.process.pid)
    assert os.getpid() != child.process.pid
