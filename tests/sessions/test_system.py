"""The session store in an eventsourcing ``System``: its saves prompt followers run by
``SingleThreadedRunner`` and ``MultiThreadedRunner``; a user's ``ProcessApplication`` reacts to every
committed ``compact/end`` exactly once, across a kill -9 of the process that runs it; eventsourcing's
``ProjectionRunner`` and notification-log reader decode session rows with the store's mapper; the
user's own aggregates live in the same PostgreSQL database as the sessions.

The leader may also be a JetStream store (its followers then keep their records in SQLite or
PostgreSQL: eventsourcing has no JetStream process recorder)."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.persistence import Tracking
from eventsourcing.popo import POPOTrackingRecorder
from eventsourcing.projection import Projection, ProjectionRunner
from eventsourcing.system import NotificationLogReader

from compaction.sessions.events import SessionEvent
from compaction.sessions.mapper import EventEnvelope
from compaction.sessions.store import SessionApplication, SessionStore, parse_store_url, system_env
from compaction.vocabulary.events import CompactEnd
from tests.builders import wait_until
from tests.conftest import ROOT
from tests.sessions.system_apps import Account, Accounts, Reactor, reactions
from tests.sessions.system_child import committed_ends, main


def app_env(name: str, url: str, folder: Path) -> dict[str, str]:
    """Settings of the user's application ``name``: its own SQLite file beside a SQLite or
    JetStream store, the store's own database beside a PostgreSQL one."""
    prefix = name.upper() + "_"
    if url.startswith("postgresql"):
        keys = ("PERSISTENCE_MODULE", "POSTGRES_DBNAME", "POSTGRES_HOST", "POSTGRES_PORT",
                "POSTGRES_USER", "POSTGRES_PASSWORD")  # fmt: skip
        store = parse_store_url(url).env
        return {prefix + key: store[key] for key in keys}
    return {
        prefix + "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        prefix + "SQLITE_DBNAME": str(folder / f"{name.lower()}.db"),
    }


@pytest.fixture(params=["sqlite", "postgresql", "nats"])
def system(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """The runner's settings: the session store (``system_env``) and the user's applications."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'sessions.db'}"
    else:
        url = str(request.getfixturevalue({"postgresql": "pg_url", "nats": "nats_url"}[request.param]))
    return {
        **system_env(url),
        **app_env("Reactor", url, tmp_path),
        **app_env("Accounts", url, tmp_path),
        "COMPACTION_TEST_STORE": url,
    }


def _store_url(env: dict[str, str]) -> str:
    return env["COMPACTION_TEST_STORE"]


@pytest.mark.parametrize("runner", ["single", "multi"])
def test_the_reactor_reacts_to_every_committed_compaction_once(system: dict[str, str], runner: str) -> None:
    main(runner, 2, system)
    with SessionStore.open(_store_url(system)) as store:
        ends = committed_ends(store)
    reactor = Reactor(env=system)
    try:
        assert len(ends) == 2
        assert collections.Counter(reactions(reactor)) == collections.Counter(ends)
    finally:
        reactor.close()


@pytest.mark.parametrize(
    ("backend", "runner"), [("sqlite", "single"), ("postgresql", "multi")], ids=["sqlite", "postgresql"]
)
def test_exactly_once_across_a_kill_9(
    backend: str, runner: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = (
        f"sqlite:///{tmp_path / 'sessions.db'}" if backend == "sqlite" else request.getfixturevalue("pg_url")
    )
    env = {**system_env(url), **app_env("Reactor", url, tmp_path)}
    markers = tmp_path / "markers"
    markers.mkdir()
    command = [sys.executable, "-m", "tests.sessions.system_child", runner]
    slow = {**os.environ, "REACTOR_MARKERS": str(markers), "REACTOR_SLOW": "30"}
    child = subprocess.Popen(
        [*command, "50", json.dumps(env)], cwd=ROOT, env=slow,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:  # killed while it reacts to its third compaction (committed, its reaction not)
        wait_until(lambda: len(list(markers.iterdir())) >= 3, 120, "three reactions under way")
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL
    with SessionStore.open(url) as store:
        before = committed_ends(store)
    reactor = Reactor(env=env)
    try:
        assert len(reactions(reactor)) < len(before)  # the kill left a compaction unreacted
    finally:
        reactor.close()

    again = subprocess.run(
        [*command, "1", json.dumps(env)], cwd=ROOT, capture_output=True, text=True,
        timeout=180, check=False,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    with SessionStore.open(url) as store:
        ends = committed_ends(store)
    reactor = Reactor(env=env)
    try:
        assert len(ends) == len(before) + 1
        assert collections.Counter(reactions(reactor)) == collections.Counter(ends)
    finally:
        reactor.close()


def test_the_users_aggregates_beside_the_sessions(pg_url: str, tmp_path: Path) -> None:
    """One PostgreSQL database: the sessions, the reactor's records and the user's accounts, each
    application in its own tables; the store's mapper stores the user's aggregates the
    eventsourcing way."""
    env = {**system_env(pg_url), **app_env("Accounts", pg_url, tmp_path)}
    accounts = Accounts(env=env)
    try:
        account = Account("ada")
        account.credit(5)
        accounts.save(account)
        assert accounts.repository.get(account.id).credits == 5
        assert type(accounts.mapper).__name__ == "SessionMapper"
    finally:
        accounts.close()
    main("single", 1, {**env, **app_env("Reactor", pg_url, tmp_path)})
    with SessionStore.open(pg_url) as store:
        assert len(store.session_ids()) == 1
        with store.application.recorder.datastore.transaction(commit=False) as cursor:  # type: ignore[attr-defined]
            cursor.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_name LIKE '%_events'"
            )
            tables = {row["table_name"] for row in cursor.fetchall()}
    assert {"sessionstore_events", "reactor_events", "accounts_events"} <= tables


class EndsView(POPOTrackingRecorder):
    """A materialised view of committed compactions (in memory)."""

    def __init__(self) -> None:
        super().__init__()
        self.ends: list[str] = []

    def add(self, compaction_id: str, tracking: Tracking) -> None:
        with self._database_lock:
            self._assert_tracking_uniqueness(tracking)
            self._insert_tracking(tracking)
            self.ends.append(compaction_id)


class EndsProjection(Projection[EndsView]):
    name = "ends"
    topics = ("compact/end",)

    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        assert isinstance(domain_event, EventEnvelope)
        assert isinstance(domain_event.event, CompactEnd)
        self.view.add(domain_event.event.compaction_id, tracking)


def test_eventsourcings_projection_runner_and_reader(sqlite_url: str) -> None:
    env = system_env(sqlite_url)
    with ProjectionRunner(
        application_class=SessionApplication, projection_class=EndsProjection, view_class=EndsView,
        env=env,
    ) as running:  # fmt: skip
        store = SessionStore.of(SessionApplication(env=env))
        try:
            main_env = {**env, "REACTOR_PERSISTENCE_MODULE": "eventsourcing.popo"}
            main("single", 1, main_env)
            last = store.max_notification_id()
            ends = committed_ends(store)
            running.wait(
                max(n.notification_id for n in store.notifications(0, last, topics=["compact/end"])),
                timeout=10,
            )
            assert running.projection.view.ends == ends
            reader = NotificationLogReader(store.application.notification_log)
            decoded = [store.application.mapper.to_domain_event(n) for n in reader.read(start=1)]
            assert len(decoded) == last
            assert all(isinstance(d, EventEnvelope) and isinstance(d.event, SessionEvent) for d in decoded)
        finally:
            store.close()


def test_a_follower_is_prompted_by_the_stores_own_saves(sqlite_url: str) -> None:
    """Without a runner: a leader's followers are whatever ``lead`` registered; each save of the
    store tells them (eventsourcing's ``RecordingEvent``, with the rows' notification ids)."""
    received: list[Any] = []
    prompted = threading.Event()

    class Listener:
        def receive_recording_event(self, recording_event: Any) -> None:
            received.append(recording_event)
            prompted.set()

    with SessionStore.open(sqlite_url) as store:
        store.application.lead(Listener())  # type: ignore[arg-type]
        session = store.create()
        from tests.builders import turn

        turn(session, "hello")
        store.save(session)
        assert prompted.is_set()
        (event,) = received
        assert event.application_name == "SessionStore"
        ids = [r.notification.id for r in event.recordings]
        assert ids == list(range(1, len(session) + 1))
        assert [r.domain_event.event.seq for r in event.recordings] == list(range(len(session)))
