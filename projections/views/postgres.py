"""PostgreSQL views: the projection's tables and ``<projection>_tracking`` in the store's database.

eventsourcing's ``PostgresTrackingRecorder`` does the tracking (single-row, refuses a position that
is not greater than the stored one); the view tables are created by the same ``create_table`` and
written in the same transaction as the tracking record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from eventsourcing.persistence import Tracking
from eventsourcing.postgres import PostgresDatastore, PostgresTrackingRecorder
from psycopg.rows import tuple_row
from psycopg.sql import SQL, Composed, Identifier

from compaction.sessions.pgrecorder import quoting
from compaction.sessions.store import drop_broken_connections, quoted_identifier
from projections.tables import Changes, Row, Table
from projections.views.base import (
    ViewRecorder,
    create_statement,
    select_statement,
    upsert_statement,
)


class PostgresView(PostgresTrackingRecorder, ViewRecorder):
    def __init__(self, datastore: PostgresDatastore, *, projection: str, tables: tuple[Table, ...]) -> None:
        super().__init__(quoting(datastore), tracking_table_name=f"{projection}_tracking")
        self.projection_name = projection
        self.tables = tables
        schema = quoted_identifier(datastore.schema)
        self._qualified = {t.name: f"{schema}.{t.name}" for t in tables}
        for t in tables:
            statement = create_statement(t, "postgresql", self._qualified[t.name])
            self.sql_create_statements.append(self._sql(statement))
        self._upserts = {
            t.name: self._sql(upsert_statement(t, self._qualified[t.name], "%s")) for t in tables
        }

    def drop_broken_connections(self) -> None:
        drop_broken_connections(self.datastore)

    @staticmethod
    def _sql(text: str) -> Composed:
        """Statements built from our own table specs (never from user input)."""
        return SQL(text).format()

    def write(self, changes: Changes, tracking: Tracking) -> None:
        with self.datastore.transaction(commit=True) as cursor:
            for name, rows in changes:
                cursor.executemany(self._upserts[name], rows)
            self._insert_tracking(cursor, tracking)

    def drop(self, application_name: str) -> None:
        """The tables are shared by every store application of the database (the partitions of
        a partitioned store), so emptying them resets EVERY application's tracking record, in the
        same transaction: no runner may resume over rows that are gone (a running one fails with
        TrackingConflictError; a new one catches up from the start)."""
        with self.datastore.transaction(commit=True) as cursor:
            for t in self.tables:
                qualified = self._qualified[t.name]
                cursor.execute(self._sql(f"DROP TABLE IF EXISTS {qualified}"))
                cursor.execute(self._sql(create_statement(t, "postgresql", qualified)))
            cursor.execute(  # every application's record; eventsourcing's migration marker stays
                SQL("DELETE FROM {0}.{1} WHERE application_name <> %s").format(
                    Identifier(self.datastore.schema), Identifier(self.tracking_table_name)
                ),
                (self.table_migration_identifier,),
            )

    def select(
        self,
        table_name: str,
        columns: Sequence[str],
        where: Mapping[str, Any] | None = None,
        order_by: Sequence[str] = (),
    ) -> list[Row]:
        table = self.table(table_name)
        statement, params = select_statement(
            table,
            self._qualified[table_name],
            columns,
            where or {},
            order_by=order_by,
            placeholder="%s",
        )
        with self.datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row) as cursor:
            cursor.execute(self._sql(statement), params)
            return list(cursor.fetchall())

    def count(self, table_name: str) -> int:
        self.table(table_name)
        statement = self._sql(f"SELECT COUNT(*) FROM {self._qualified[table_name]}")
        with self.datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row) as cursor:
            cursor.execute(statement)
            found = cursor.fetchone()
            return int(found[0]) if found else 0
