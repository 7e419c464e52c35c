"""PostgreSQL large saves: a 10 MB and a 50 MB event and a 20k-event single save
finish within a stated time while a second writer keeps making progress.

eventsourcing's stock recorder sends the save in psycopg's pipeline mode, where a payload above
about 5 MB deadlocks client and server while the EXCLUSIVE table lock is held (measured: the 10 MB
save never returned; every other writer waited with it). The store's recorder
(:mod:`compaction.sessions.pgrecorder`) sends plain statements in bounded batches, in one transaction.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from uuid import uuid4

import pytest

from compaction.errors import StoreError
from compaction.sessions import pgrecorder
from compaction.sessions.blocks import Message, TextBlock
from compaction.sessions.events import UserMessage
from compaction.sessions.native import export_session
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from tests.builders import run_json

pytestmark = pytest.mark.postgres

POOL_WAIT = "30"
"""Seconds a store of these tests waits for a pooled connection (``connect_timeout``, default 5).
On a saturated machine (2 cores, a busy shared server) opening a connection in the pool's
background thread took longer than 5 s and a save failed with PoolTimeout before it began; these
tests bound the saves, not the connection setup."""


@pytest.fixture(autouse=True)
def patient_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every store these tests open (the command line's included) waits :data:`POOL_WAIT` seconds
    for a connection: ``POSTGRES_CONNECT_TIMEOUT`` from the environment, as a deployment sets it."""
    monkeypatch.setenv("POSTGRES_CONNECT_TIMEOUT", POOL_WAIT)


def _message(text: str, index: int = 0) -> UserMessage:
    return UserMessage(
        message=Message(id=f"u{index}", role="user", content=(TextBlock(text),)),
        surface_op="append",
    )


@dataclass
class Writer:
    """A second writer: small saves to its own session, in a loop, until stopped."""

    url: str
    saves: int = 0
    errors: list[str] = field(default_factory=list)
    slowest: float = 0.0
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with SessionStore.open(self.url) as store:
            session = store.create(strict_structure=False)
            while not self.stop.is_set():
                session.append(_message("small", self.saves))
                began = time.perf_counter()
                try:
                    store.save(session)
                except StoreError as e:
                    self.errors.append(str(e))
                    return
                self.slowest = max(self.slowest, time.perf_counter() - began)
                self.saves += 1
                time.sleep(0.01)


@contextmanager
def second_writer(url: str) -> Iterator[Writer]:
    writer = Writer(url)
    thread = threading.Thread(target=writer.run, daemon=True)
    thread.start()
    try:
        yield writer
    finally:
        writer.stop.set()
        thread.join(30)
        assert not thread.is_alive(), "the second writer never returned"


def _timed_save(store: SessionStore, session: Session) -> float:
    began = time.perf_counter()
    store.save(session)
    return time.perf_counter() - began


@pytest.mark.parametrize(
    ("megabytes", "within"), [(10, 10.0), pytest.param(50, 40.0, marks=pytest.mark.slow)]
)
def test_one_huge_event_saves_in_time_while_another_writer_progresses(
    pg_url: str, megabytes: int, within: float
) -> None:
    with SessionStore.open(pg_url) as store, second_writer(pg_url) as writer:
        session = store.create(strict_structure=False)
        session.append(_message("x" * (megabytes * 1_000_000)))
        before = writer.saves
        seconds = _timed_save(store, session)
        time.sleep(0.3)  # the writer goes on after the big save released the table lock
        after = writer.saves
        loaded = store.get(session.id)
    assert seconds < within, f"a {megabytes} MB save took {seconds:.1f}s (bound {within}s)"
    assert writer.errors == []
    assert after > before, "the second writer made no progress"
    assert writer.slowest < within
    assert loaded.event(0) == session.event(0)


def test_twenty_thousand_events_in_one_save_are_atomic_and_in_time(pg_url: str) -> None:
    with SessionStore.open(pg_url) as store, second_writer(pg_url) as writer:
        store.snapshot_interval = 0
        session = store.create(strict_structure=False)
        session.append_all(_message("y" * 400, i) for i in range(20_000))
        seconds = _timed_save(store, session)
        time.sleep(0.3)
        progressed = writer.saves
        length = store.stream_length(session.id)
        ids = store.session_ids()
    assert seconds < 20.0, f"20k events took {seconds:.1f}s"
    assert length == 20_000
    assert session.id in ids
    assert writer.errors == [] and progressed > 0


def test_a_multi_batch_save_that_conflicts_stores_nothing(pg_url: str) -> None:
    """Batches share one transaction: a taken seq in the last batch rolls back the first ones."""
    with SessionStore.open(pg_url) as store:
        recorder = store.application.recorder
        assert isinstance(recorder, pgrecorder.SessionPostgresRecorder)
        recorder.batch_bytes = 10_000  # many INSERTs per save
        session = store.create(strict_structure=False)
        session.append_all(_message("z" * 1000, i) for i in range(200))
        rival = Session(session.id, strict_structure=False)
        for i in range(200):
            rival.append(session.event(i))
        store.append_events(session.id, [rival.event(199)])  # the last seq is taken
        with pytest.raises(StoreError):
            store.save(session)
        assert store.stream_length(session.id) == 200
        assert [e.seq for e in store.load_events(session.id)] == [199]


def test_a_save_blocked_by_the_table_lock_fails_after_lock_timeout(pg_url: str) -> None:
    """No writer waits for the table lock forever: lock_timeout (from the URL) bounds the wait."""
    import psycopg

    with SessionStore.open(f"{pg_url}?lock_timeout=1") as store:
        session = store.create(strict_structure=False)
        session.append(_message("first"))
        store.save(session)
        holder = psycopg.connect(pg_url)
        try:
            holder.execute("LOCK TABLE sessionstore_events IN EXCLUSIVE MODE")
            session.append(_message("blocked", 1))
            began = time.perf_counter()
            with pytest.raises(StoreError, match="lock timeout"):
                store.save(session)
            waited = time.perf_counter() - began
        finally:
            holder.rollback()
            holder.close()
    assert waited < 5.0


def test_a_statement_timeout_from_the_url_bounds_a_save(pg_url: str) -> None:
    with SessionStore.open(f"{pg_url}?statement_timeout=0.001") as store:
        recorder = store.application.recorder
        assert isinstance(recorder, pgrecorder.SessionPostgresRecorder)
        assert recorder.statement_timeout == 0.001
        session = store.create(strict_structure=False)
        session.append(_message("x" * 20_000_000))
        with pytest.raises(StoreError, match="statement timeout"):
            store.save(session)
        assert store.stream_length(session.id) == 0


def test_postgres_settings_come_from_the_url_then_the_environment(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POSTGRES_LOCK_TIMEOUT", "7")
    monkeypatch.setenv("POSTGRES_POOL_SIZE", "2")
    with SessionStore.open(f"{pg_url}?pool_size=3&idle_in_transaction_session_timeout=9") as store:
        settings = store.settings
        datastore = store.application.recorder.datastore  # type: ignore[attr-defined]
        assert (settings["POSTGRES_LOCK_TIMEOUT"], settings["POSTGRES_POOL_SIZE"]) == ("7", "3")
        assert datastore.lock_timeout == 7
        assert datastore.idle_in_transaction_session_timeout == 9
        assert datastore.pool.min_size == 3
        assert datastore.pool.timeout == float(POOL_WAIT)  # the patient pool of every test here


def test_the_database_function_insert_path_is_selectable(pg_url: str) -> None:
    with SessionStore.open(f"{pg_url}?enable_db_functions=yes") as store:
        assert store.application.recorder.datastore.enable_db_functions  # type: ignore[attr-defined]
        session = store.create(strict_structure=False)
        session.append(_message("x" * 10_000_000))
        assert _timed_save(store, session) < 10.0
        assert store.stream_length(session.id) == 1


def test_partitioned_unannounced_stores_use_the_bounded_insert(pg_url: str) -> None:
    from compaction.sessions.partitioned import PartitionedSessionStore, open_store

    with open_store(f"{pg_url}?partitions=2&notify=off") as store:
        assert isinstance(store, PartitionedSessionStore)
        session = store.create(uuid4(), strict_structure=False)
        session.append(_message("x" * 10_000_000))
        began = time.perf_counter()
        store.save(session)
        assert time.perf_counter() - began < 10.0
        assert isinstance(
            store.partition_for(session.id).application.recorder, pgrecorder.SessionPostgresRecorder
        )


def test_copy_of_a_session_holding_a_10_mb_event_to_postgresql(pg_url: str, sqlite_url: str) -> None:
    from tests.builders import run_json

    with SessionStore.open(sqlite_url) as source:
        session = source.create(strict_structure=False)
        session.append(_message("x" * 10_000_000))
        session.append(_message("after", 1))
        source.save(session)
    began = time.perf_counter()
    code, document = run_json("--store", sqlite_url, "copy", "--to", pg_url, "--all")
    seconds = time.perf_counter() - began
    assert code == 0, document
    assert seconds < 20.0
    with SessionStore.open(pg_url) as target:
        assert target.get(session.id).event(0) == session.event(0)


def test_a_40_mb_import_survives_a_one_second_idle_in_transaction_timeout(
    pg_url: str, tmp_path: Path
) -> None:
    """The connection's ``idle_in_transaction_session_timeout`` is 1 s; a save's transaction never
    waits on the client that long (its batches are built before it begins, and the save's own
    statements set the timeout for the save: docs/sessions.md)."""
    session = Session(strict_structure=False)
    session.append_all(_message("z" * 200_000, i) for i in range(200))  # 40 MB
    path = tmp_path / "big.jsonl"
    export_session(session, path)
    url = f"{pg_url}?idle_in_transaction_session_timeout=1"
    code, document = run_json("--store", url, "import", str(path))
    assert code == 0, document
    with SessionStore.open(pg_url) as store:
        assert store.stream_length(session.id) == 200
        assert store.get(session.id).event(199) == session.event(199)


@contextmanager
def starved_client(seconds: float) -> Iterator[None]:
    """A CPU-starved client, for real: a busy thread holds the interpreter lock, and the switch
    interval makes every thread that returns from the database wait ``seconds`` for it (the
    client then sits idle between the statements it sends, as on a saturated host)."""
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    previous = sys.getswitchinterval()
    busy = threading.Thread(target=spin, daemon=True)
    sys.setswitchinterval(seconds)
    busy.start()
    try:
        yield
    finally:
        stop.set()
        sys.setswitchinterval(previous)
        busy.join()


def test_a_starved_client_keeps_its_large_save_under_a_one_second_idle_timeout(
    pg_url: str,
) -> None:
    """Every gap between the save's statements lasts 1.3 s, past the connection's 1 s
    ``idle_in_transaction_session_timeout``: the save still commits (it sets the timeout for
    itself before its transaction begins, and puts the connection's back after)."""
    url = f"{pg_url}?idle_in_transaction_session_timeout=1"
    with SessionStore.open(url) as store:
        store.snapshot_interval = 0
        session = store.create(strict_structure=False)
        session.append_all(_message("w" * 1_000_000, i) for i in range(20))  # 20 MB, 3 batches
        store.stream_length(session.id)  # the pool's connection is open before the starving
        with starved_client(1.3):
            store.save(session)
        assert store.stream_length(session.id) == 20
        with store.application.recorder.datastore.get_connection() as conn:  # type: ignore[attr-defined]
            shown = conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()
    assert shown is not None and list(shown.values()) == ["1s"]
