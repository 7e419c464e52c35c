"""Tampering with stored rows on purpose, straight through the database driver (SQLite file or
PostgreSQL database of a store URL): what a damaged disk, a foreign writer or a bad restore does."""

from __future__ import annotations

import sqlite3
from uuid import UUID

from compaction.sessions.store import parse_store_url

EVENTS = {"sqlite": "stored_events", "postgresql": "sessionstore_events"}
SNAPSHOTS = {"sqlite": "stored_snapshots", "postgresql": "sessionstore_snapshots"}


def execute(url: str, statement: str, params: tuple[object, ...]) -> int:
    """Run one statement (``?`` placeholders) on the store's database; the rows it changed."""
    location = parse_store_url(url)
    if location.kind == "sqlite":
        connection = sqlite3.connect(location.env["SQLITE_DBNAME"])
        with connection:
            changed = connection.execute(statement, params).rowcount
        connection.close()
        return changed
    import psycopg

    env = location.env
    with psycopg.connect(
        dbname=env["POSTGRES_DBNAME"],
        host=env["POSTGRES_HOST"],
        port=env["POSTGRES_PORT"],
        user=env["POSTGRES_USER"],
        autocommit=True,
    ) as pg:
        return pg.execute(statement.replace("?", "%s"), params).rowcount


def _key(url: str, session_id: UUID) -> object:
    return session_id.hex if parse_store_url(url).kind == "sqlite" else session_id


def set_state(url: str, session_id: UUID, seq: int, state: bytes) -> None:
    table = EVENTS[parse_store_url(url).kind]
    changed = execute(
        url,
        f"UPDATE {table} SET state = ? WHERE originator_id = ? AND originator_version = ?",
        (state, _key(url, session_id), seq),
    )
    assert changed == 1, f"no row {session_id} seq {seq}"


def set_topic(url: str, session_id: UUID, seq: int, topic: str) -> None:
    table = EVENTS[parse_store_url(url).kind]
    changed = execute(
        url,
        f"UPDATE {table} SET topic = ? WHERE originator_id = ? AND originator_version = ?",
        (topic, _key(url, session_id), seq),
    )
    assert changed == 1


def delete_row(url: str, session_id: UUID, seq: int) -> None:
    table = EVENTS[parse_store_url(url).kind]
    changed = execute(
        url,
        f"DELETE FROM {table} WHERE originator_id = ? AND originator_version = ?",
        (_key(url, session_id), seq),
    )
    assert changed == 1


def move_row(url: str, session_id: UUID, seq: int, to: int) -> None:
    """Give the row at ``seq`` another position (its payload still says ``seq``)."""
    table = EVENTS[parse_store_url(url).kind]
    changed = execute(
        url,
        f"UPDATE {table} SET originator_version = ? WHERE originator_id = ? AND originator_version = ?",
        (to, _key(url, session_id), seq),
    )
    assert changed == 1


def corrupt_snapshots(url: str, session_id: UUID, state: bytes = b"\xc1not msgpack") -> int:
    table = SNAPSHOTS[parse_store_url(url).kind]
    return execute(
        url, f"UPDATE {table} SET state = ? WHERE originator_id = ?", (state, _key(url, session_id))
    )
