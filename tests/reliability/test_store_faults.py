"""A save whose events committed reports success; a save whose events did not says so.

A trigger in the store's own database refuses inserts into the snapshot table (as a full disk or
any database error on it would): ``compaction import`` exits 0, every event is stored and the
snapshot is reported as a warning. The same trigger on the events table: exit 1 with a
:class:`~compaction.errors.SaveError` that says nothing was stored, and nothing is.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compaction.errors import SaveError
from compaction.sessions.hashing import surface_hash
from compaction.sessions.native import export_session
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from tests.builders import run_json, turn

SNAPSHOT_EVERY = 1000


@pytest.fixture
def long_export(tmp_path: Path) -> tuple[Path, Session]:
    """A native export of one session above the snapshot interval (a snapshot is due on import)."""
    session = Session()
    while len(session) <= SNAPSHOT_EVERY + 200:
        turn(session, f"task {len(session)}", steps=50)
    path = tmp_path / "long.jsonl"
    export_session(session, path)
    return path, session


def _tables(url: str) -> tuple[str, str]:
    with SessionStore.open(url) as store:
        snapshots = store.application.snapshots
        assert snapshots is not None
        events: Any = store.application.recorder
        return events.events_table_name, snapshots.recorder.events_table_name  # type: ignore[attr-defined]


@contextlib.contextmanager
def refusing_inserts(url: str, table: str) -> Iterator[None]:
    """A trigger that fails every insert into ``table`` of the store at ``url``."""
    if url.startswith("sqlite"):
        connection = sqlite3.connect(url.removeprefix("sqlite:///"))
        connection.execute(
            f"CREATE TRIGGER refuse BEFORE INSERT ON {table} "
            "BEGIN SELECT RAISE(ABORT, 'inserts refused by the test'); END"
        )
        connection.commit()
        connection.close()
        yield
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'inserts refused by the test'; END $$"
        )
        connection.execute(
            f"CREATE TRIGGER refuse BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION refuse()"
        )
    yield


def test_a_refused_snapshot_is_a_warning_and_every_event_is_stored(
    table_store_url: str, long_export: tuple[Path, Session]
) -> None:
    path, session = long_export
    _, snapshots = _tables(table_store_url)
    with refusing_inserts(table_store_url, snapshots):
        code, document = run_json("--store", table_store_url, "import", str(path))
    assert code == 0, document
    assert document["sessions"][0]["status"] == "imported"
    (warning,) = document["warnings"]
    assert str(session.id) in warning and "snapshot" in warning and "are stored" in warning
    with SessionStore.open(table_store_url) as store:
        assert store.stream_length(session.id) == len(session)
        assert surface_hash(store.get(session.id)) == surface_hash(session)


def test_refused_events_fail_with_a_library_error_and_store_nothing(
    table_store_url: str, long_export: tuple[Path, Session]
) -> None:
    path, session = long_export
    events, _ = _tables(table_store_url)
    with refusing_inserts(table_store_url, events):
        code, document = run_json("--store", table_store_url, "import", str(path))
        with SessionStore.open(table_store_url) as store:
            with pytest.raises(SaveError) as raised:
                fresh = Session()
                turn(fresh)
                store.save(fresh)
            length = store.stream_length(session.id)
    assert code == 1
    assert document["error"]["type"] == "SaveError", document
    assert "none of them were stored" in document["error"]["message"]
    assert raised.value.stored is False
    assert length == 0
