"""The raw ``sqlite3`` baselines: the same table shape and pragmas as eventsourcing's SQLite
application recorder (WAL, autocommit connection, explicit ``BEGIN``), nothing else."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from compaction.sessions.events import event_class

Row = tuple[str, int, str, bytes]  # originator_id (hex), originator_version, topic, state

TABLE = (
    "CREATE TABLE IF NOT EXISTS stored_events (originator_id TEXT, originator_version INTEGER, "
    "topic TEXT, state BLOB, PRIMARY KEY (originator_id, originator_version))"
)
INSERT = "INSERT INTO stored_events VALUES (?,?,?,?)"
SELECT = (
    "SELECT originator_version, topic, state FROM stored_events WHERE originator_id=? "
    "ORDER BY originator_version ASC"
)


def connect(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    connection.execute("PRAGMA journal_mode=WAL;")
    connection.execute(TABLE)
    return connection


def stored_rows(path: Path) -> list[Row]:
    """Every row a SessionStore wrote to ``path``, in stream order (the exact encoded bytes)."""
    connection = sqlite3.connect(path)
    try:
        return list(
            connection.execute(
                "SELECT originator_id, originator_version, topic, state FROM stored_events "
                "ORDER BY originator_id, originator_version"
            )
        )
    finally:
        connection.close()


def insert_batches(connection: sqlite3.Connection, batches: Sequence[Sequence[Row]]) -> None:
    """One transaction per batch, one INSERT per row (as the application recorder does)."""
    cursor = connection.cursor()
    for batch in batches:
        cursor.execute("BEGIN")
        for row in batch:
            cursor.execute(INSERT, row)
        cursor.execute("COMMIT")


def select_and_decode(connection: sqlite3.Connection, originator_hex: str) -> list[Any]:
    """Select one stream and decode each payload into its typed event Struct."""
    decoders: dict[str, msgspec.json.Decoder[Any]] = {}
    events: list[Any] = []
    for _version, topic, state in connection.execute(SELECT, (originator_hex,)).fetchall():
        decoder = decoders.get(topic)
        if decoder is None:
            decoder = decoders[topic] = msgspec.json.Decoder(event_class(topic))
        events.append(decoder.decode(state))
    return events
