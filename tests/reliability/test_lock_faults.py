"""A compaction whose commit fails in the database never locks out its own process.

On PostgreSQL the compacting process's connections are terminated (``pg_terminate_backend``, what a
restart or a failover does to them) between its ``compact/start`` and its commit: the commit fails,
the failed bracket's ``compact/end`` is retried until the store answers, and the same process
compacts the session again at once; recovery finds nothing live.

On SQLite a trigger refuses every insert from the commit on, for longer than the engine retries its
``compact/end``: the error is a :class:`LockHeldError` naming the compaction, the held lock and what
releases it; recovery on this host judges the lease stale (``owner-failed``) although its owner
lives; another engine is still refused; the owner's next compaction takes the lease over at once.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from compaction.engine.lock import failure_reports_dir, inspect_lock
from compaction.errors import BusyError, CommitError, LockHeldError
from compaction.service import BasicCompactService
from compaction.sessions.store import SessionStore
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.events import CompactEnd
from recovery import RecoveryConfig, recover
from tests.compaction.test_transaction import RELAXED, working_session


@pytest.fixture(autouse=True)
def failure_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "failures"
    monkeypatch.setenv("COMPACTION_FAILURE_DIR", str(folder))
    return folder


def terminate_backends(url: str) -> int:
    """End every connection to the database of ``url`` but this one; how many were ended."""
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        ).fetchall()
    return len(rows)


def terminating(url: str, seconds: float, ended: list[int]) -> threading.Thread:
    """A thread that ends the database's connections every 50 ms for ``seconds`` (the store is
    unreachable for that long, as during a restart); counts into ``ended``."""

    def run() -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            ended.append(terminate_backends(url))
            time.sleep(0.05)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


async def test_terminated_backends_at_commit_do_not_lock_out_the_same_process(pg_url: str) -> None:
    terminated: list[int] = []
    killer: list[threading.Thread] = []

    def at(stage: str) -> None:
        if stage == "before-commit" and not killer:
            terminated.append(terminate_backends(pg_url))
            killer.append(terminating(pg_url, 2.0, terminated))

    engine = BasicCompactService(BasicConfig(**RELAXED), on_progress=at)
    with SessionStore.open(pg_url) as store:
        session = working_session(close_turn=True)
        store.save(session)
        with pytest.raises(CommitError) as raised:
            await engine.compact_now(session, store=store)
        failed_at = time.monotonic()
        killer[0].join()
        assert terminated and terminated[0] >= 1
        assert not isinstance(raised.value, LockHeldError), raised.value  # the end was stored
        result = await engine.compact_now(session, store=store)
        again = time.monotonic() - failed_at
        loaded = store.get(session.id)
        report = recover(store)
    assert result is not None and again < 15.0
    assert not inspect_lock(loaded).live
    ends = [e for e in loaded.events() if isinstance(e, CompactEnd)]
    assert len(ends) == 2 and ends[0].error is not None and ends[1].error is None
    assert [o for o in report.orphans if not o.stale] == []
    assert report.orphans == ()


async def test_an_end_that_cannot_be_stored_is_taken_over_by_its_own_process(
    sqlite_url: str, failure_reports: Path
) -> None:
    database = sqlite_url.removeprefix("sqlite:///")

    def refuse_inserts(stage: str) -> None:
        if stage == "before-commit":
            with sqlite3.connect(database) as connection:
                connection.execute(
                    "CREATE TRIGGER refuse BEFORE INSERT ON stored_events "
                    "BEGIN SELECT RAISE(ABORT, 'disk full (the test)'); END"
                )

    engine = BasicCompactService(BasicConfig(**RELAXED), on_progress=refuse_inserts)
    engine.close_budget = 0.5
    with SessionStore.open(sqlite_url) as store:
        session = working_session(close_turn=True)
        store.save(session)
        with pytest.raises(LockHeldError) as raised:
            await engine.compact_now(session, store=store)
        held = inspect_lock(store.get(session.id))
        assert held.live and held.start is not None
        message = str(raised.value)
        assert held.start.compaction_id in message
        assert f"compact/start seq {held.start_seq}" in message
        assert "takes it over at once" in message and "compaction recover --repair" in message
        assert "disk full (the test)" in message
        assert isinstance(raised.value.__cause__, CommitError)
        assert failure_reports_dir() == failure_reports
        assert (failure_reports / f"{held.start.compaction_id}.json").is_file()

        (orphan,) = recover(store).orphans
        assert orphan.stale and orphan.rule == "owner-failed" and orphan.action == "would-repair"

        with sqlite3.connect(database) as connection:
            connection.execute("DROP TRIGGER refuse")
        engine.on_progress = None
        with pytest.raises(BusyError):  # another engine does not own the failure
            await BasicCompactService(BasicConfig(**RELAXED)).compact_now(store.get(session.id), store=store)
        result = await engine.compact_now(store.get(session.id), store=store)
        loaded = store.get(session.id)
        report = recover(store, RecoveryConfig(repair=True))
    assert result is not None
    taken = loaded.event(result.start_seq - 1)
    assert isinstance(taken, CompactEnd) and taken.compaction_id == held.start.compaction_id
    assert taken.error is not None and "taken over by its own process" in taken.error
    assert not inspect_lock(loaded).live and report.orphans == ()
    assert not (failure_reports / f"{held.start.compaction_id}.json").exists()
