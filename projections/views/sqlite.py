"""SQLite views: every projection's tables and its own tracking table in one views file.

eventsourcing's ``SQLiteTrackingRecorder`` names its tracking table ``tracking``; several views in
one file would share it, so this recorder names it ``<projection>_tracking`` (as eventsourcing's
PostgreSQL factory does). Everything else (single-row tracking that refuses a position not greater
than the stored one, WAL, the connection pool) is eventsourcing's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from eventsourcing.persistence import Tracking
from eventsourcing.sqlite import SQLiteDatastore, SQLiteTrackingRecorder

from projections.tables import Changes, Row, Table
from projections.views.base import (
    ViewRecorder,
    create_statement,
    select_statement,
    upsert_statement,
)


class SQLiteView(SQLiteTrackingRecorder, ViewRecorder):
    def __init__(self, datastore: SQLiteDatastore, *, projection: str, tables: tuple[Table, ...]) -> None:
        # Set before the base initializer, which asks for the create statements.
        self.projection_name = projection
        self.tables = tables
        self.tracking_table = f"{projection}_tracking"
        super().__init__(datastore)
        self.insert_tracking_statement = (
            f"INSERT INTO {self.tracking_table} VALUES (:application_name, :notification_id) "
            "ON CONFLICT (application_name) DO UPDATE SET notification_id = :notification_id "
            f"WHERE {self.tracking_table}.notification_id < :notification_id "
            "RETURNING notification_id"
        )
        self.select_max_tracking_id_statement = (
            f"SELECT MAX(notification_id) FROM {self.tracking_table} WHERE application_name=?"
        )
        self._upserts = {t.name: upsert_statement(t, t.name, "?") for t in tables}

    def construct_create_table_statements(self) -> list[str]:
        return [
            f"CREATE TABLE IF NOT EXISTS {self.tracking_table} (application_name TEXT, "
            "notification_id INTEGER, PRIMARY KEY (application_name)) WITHOUT ROWID",
            *(create_statement(t, "sqlite", t.name) for t in self.tables),
        ]

    def write(self, changes: Changes, tracking: Tracking) -> None:
        with self.datastore.get_connection(commit=True) as connection:
            # A view is rebuildable: after a power loss it may lose its last batches, but never
            # consistency (WAL keeps each batch and its tracking record atomic), so it can skip
            # the fsync per commit that the event store needs.
            connection.cursor().execute("PRAGMA synchronous=NORMAL")
            with connection.transaction(commit=True) as cursor:
                for name, rows in changes:
                    cursor.executemany(self._upserts[name], rows)
                self._insert_tracking(cursor, tracking)

    def drop(self, application_name: str) -> None:
        with self.datastore.transaction(commit=True) as cursor:
            for t in self.tables:
                cursor.execute(f"DROP TABLE IF EXISTS {t.name}")
                cursor.execute(create_statement(t, "sqlite", t.name))
            cursor.execute(f"DELETE FROM {self.tracking_table} WHERE application_name=?", (application_name,))

    def select(
        self,
        table_name: str,
        columns: Sequence[str],
        where: Mapping[str, Any] | None = None,
        order_by: Sequence[str] = (),
    ) -> list[Row]:
        table = self.table(table_name)
        statement, params = select_statement(
            table, table.name, columns, where or {}, order_by=order_by, placeholder="?"
        )
        with self.datastore.transaction(commit=False) as cursor:
            cursor.execute(statement, params)
            return [tuple(r) for r in cursor.fetchall()]

    def count(self, table_name: str) -> int:
        table = self.table(table_name)
        with self.datastore.transaction(commit=False) as cursor:
            cursor.execute(f"SELECT COUNT(*) FROM {table.name}")
            return int(cursor.fetchone()[0])
