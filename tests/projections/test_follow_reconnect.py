"""``compaction rebuild --follow`` rides out a lost PostgreSQL connection.

The follower runs as its own process, its connections named by ``PGAPPNAME``; the test ends them
(``pg_terminate_backend``, what a restart or a failover does to them) while the database refuses
new connections for a while (``ALLOW_CONNECTIONS false``: the follower's reconnects fail as they
would while the server is down). The follower keeps running, catches up with the events appended
afterwards, and stops cleanly on SIGTERM; ``rebuild --resume`` then has nothing to apply. Refused
for longer than its ``--reconnect-attempts``, it exits 1 saying why.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from compaction.sessions.store import SessionStore
from projections import ALL, ViewRecorder
from tests.builders import run_json, wait_until
from tests.projections.test_crash import finish, grow, positions
from tests.projections.test_projections import Writer, check_against_aggregate

pytestmark = pytest.mark.postgres

CLI = [sys.executable, "-m", "compaction.cli.main"]
FOLLOWER = "compaction-follower-under-test"


@pytest.fixture
def store(pg_url: str) -> Iterator[SessionStore]:
    with SessionStore.open(pg_url) as opened:
        yield opened


def follower(url: str, *arguments: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, "--store", url, "rebuild", "--follow", "--poll", "0.05", *arguments, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PGAPPNAME": FOLLOWER},
    )


def _admin(url: str, statement: str, *params: object) -> list[tuple[object, ...]]:
    import psycopg

    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
        cursor = admin.execute(statement, params or None)  # type: ignore[arg-type]
        return cursor.fetchall() if cursor.description else []


@contextmanager
def database_down(url: str) -> Iterator[int]:
    """The database refuses new connections and the follower's are ended; yields how many."""
    name = url.rsplit("/", 1)[1]
    _admin(url, f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false')
    try:
        ended = _admin(
            url,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND application_name = %s",
            name,
            FOLLOWER,
        )
        yield len(ended)
    finally:
        _admin(url, f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true')


def test_a_follower_reconnects_and_catches_up_after_its_connections_are_ended(
    store: SessionStore, pg_url: str, probe: dict[str, ViewRecorder]
) -> None:
    grow(store, seed=41, sessions=2, operations=8)
    writer = Writer(store, random.Random(42))
    first = store.max_notification_id()
    child = follower(pg_url)
    try:
        wait_until(lambda: set(positions(store, probe).values()) == {first}, 60, "the catch-up")
        with database_down(pg_url) as ended:
            assert ended >= 1, "the follower had no connection to end"
            time.sleep(2.0)
            assert child.poll() is None, child.communicate()
        session = writer.new_session()
        for _ in range(4):
            writer.step(session)
        second = store.max_notification_id()
        assert second > first
        wait_until(lambda: set(positions(store, probe).values()) == {second}, 60, "the new events")
        assert child.poll() is None
        child.send_signal(signal.SIGTERM)
        document = finish(child)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert [(p["name"], p["position"]) for p in document["projections"]] == [(name, second) for name in ALL]
    check_against_aggregate(store, probe)
    code, resumed = run_json("--store", pg_url, "rebuild", "--resume")
    assert code == 0
    assert [p["events"] for p in resumed["projections"]] == [0] * len(ALL)


def test_a_follower_refused_too_long_exits_1_saying_why(
    store: SessionStore, pg_url: str, probe: dict[str, ViewRecorder]
) -> None:
    grow(store, seed=43, sessions=1, operations=4)
    first = store.max_notification_id()
    # connect_timeout=1: each of eventsourcing's own 10 tries of a read waits 1 s for a connection
    child = follower(f"{pg_url}?connect_timeout=1", "--reconnect-attempts", "1")
    try:
        wait_until(lambda: set(positions(store, probe).values()) == {first}, 60, "the catch-up")
        with database_down(pg_url):
            out, err = child.communicate(timeout=90)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 1, (out, err)
    error = json.loads(out)["error"]
    assert error["type"] == "FollowerGaveUpError"
    assert "gave up after 2 failed attempts in a row" in error["message"]
    assert f"the views are at notification {first}" in error["message"]
    assert "Traceback" not in err


def terminate_follower(url: str) -> int:
    """End the follower's connections to the test's own database (the server stays up)."""
    return len(
        _admin(
            url,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND application_name = %s",
            url.rsplit("/", 1)[1],
            FOLLOWER,
        )
    )


@pytest.mark.slow
def test_rounds_of_terminated_connections_are_each_recovered_on_the_next_attempt(
    store: SessionStore, pg_url: str, probe: dict[str, ViewRecorder]
) -> None:
    """Every pooled connection of the follower dies at once, round after round, while the server
    stays up: the follower's next attempt reaches it (none of the dead connections is handed out
    again), so it never fails twice in a row and catches up each round without backoff."""
    grow(store, seed=45, sessions=2, operations=8)
    writer = Writer(store, random.Random(46))
    session = writer.new_session()
    child = follower(pg_url)
    try:
        wait_until(
            lambda: set(positions(store, probe).values()) == {store.max_notification_id()}, 60, "the catch-up"
        )
        for _ in range(5):
            for _ in range(3):  # the follower's pool holds several connections, all used
                writer.step(session)
            wait_until(
                lambda: set(positions(store, probe).values()) == {store.max_notification_id()}, 30, "a round"
            )
            assert terminate_follower(pg_url) >= 1, "the follower had no connection to end"
            for _ in range(2):
                writer.step(session)
            wait_until(
                lambda: set(positions(store, probe).values()) == {store.max_notification_id()},
                30,
                "the events after a round",
            )
        assert child.poll() is None
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 0, err
    attempts = [int(n) for n in re.findall(r"\(attempt (\d+) of \d+\)", err)]
    assert attempts and max(attempts) == 1, f"failed attempts in a row: {attempts}\n{err[-3000:]}"
    check_against_aggregate(store, probe)
