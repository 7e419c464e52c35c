"""The view recorder interface: an eventsourcing ``TrackingRecorder`` that also owns view tables.

Every backend implements the same four operations over the :class:`~projections.tables.Table` s
it was given: :meth:`ViewRecorder.write` (upsert a batch of rows and record the tracking position in
ONE transaction), :meth:`ViewRecorder.drop` (empty the tables and forget the tracking position,
atomically), :meth:`ViewRecorder.select` and :meth:`ViewRecorder.count`. The tracking record is
eventsourcing's single-row tracking: recording a position that is not greater than the stored one
fails, so a batch can never be applied twice.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from eventsourcing.persistence import Tracking, TrackingRecorder

from projections.tables import Changes, Row, Table


class ViewRecorder(TrackingRecorder, ABC):
    """A projection's materialized view plus its tracking record."""

    projection_name: str
    tables: tuple[Table, ...]

    def drop_broken_connections(self) -> None:
        """After a lost connection: replace the view database's broken pooled connections
        (PostgreSQL); nothing for the other backends."""

    def table(self, name: str) -> Table:
        for candidate in self.tables:
            if candidate.name == name:
                return candidate
        raise KeyError(
            f"view {self.projection_name!r} has no table {name!r}; it has "
            f"{', '.join(t.name for t in self.tables)}"
        )

    @abstractmethod
    def write(self, changes: Changes, tracking: Tracking) -> None:
        """Upsert every changed row and record ``tracking``, all or nothing."""

    @abstractmethod
    def drop(self, application_name: str) -> None:
        """Empty every view table and delete the tracking record of ``application_name``."""

    @abstractmethod
    def select(
        self,
        table_name: str,
        columns: Sequence[str],
        where: Mapping[str, Any] | None = None,
        order_by: Sequence[str] = (),
    ) -> list[Row]:
        """Rows of ``columns`` where every ``where`` column equals its value (None: IS NULL),
        ordered by ``order_by`` (default: the table key)."""

    @abstractmethod
    def count(self, table_name: str) -> int:
        """How many rows ``table_name`` holds."""

    location: str = "memory"
    """Where the view lives, for people (a file, a database, or memory)."""

    def create_table(self) -> None:
        """Create the tracking and view tables when missing (SQL backends override this)."""

    def rows(self) -> int:
        """Rows over every table of the view."""
        return sum(self.count(t.name) for t in self.tables)


# ---------------------------------------------------------------- SQL for SQLite and PostgreSQL

SQL_TYPES = {
    "sqlite": {"text": "TEXT", "int": "INTEGER", "real": "REAL"},
    "postgresql": {"text": "text", "int": "bigint", "real": "double precision"},
}


def create_statement(table: Table, dialect: str, qualified: str) -> str:
    types = SQL_TYPES[dialect]
    columns = ", ".join(
        f"{c.name} {types[c.kind]}{' NOT NULL' if c.name in table.key else ''}" for c in table.columns
    )
    key = ", ".join(table.key)
    return f"CREATE TABLE IF NOT EXISTS {qualified} ({columns}, PRIMARY KEY ({key}))"


def upsert_statement(table: Table, qualified: str, placeholder: str) -> str:
    names = table.column_names
    values = ", ".join(placeholder for _ in names)
    updates = ", ".join(f"{n} = excluded.{n}" for n in names if n not in table.key)
    conflict = f"DO UPDATE SET {updates}" if updates else "DO NOTHING"
    return (
        f"INSERT INTO {qualified} ({', '.join(names)}) VALUES ({values}) "
        f"ON CONFLICT ({', '.join(table.key)}) {conflict}"
    )


def select_statement(
    table: Table,
    qualified: str,
    columns: Sequence[str],
    where: Mapping[str, Any],
    *,
    order_by: Sequence[str],
    placeholder: str,
) -> tuple[str, list[Any]]:
    for name in (*columns, *where, *order_by):
        table.index_of(name)  # raises KeyError naming the table's columns
    clauses: list[str] = []
    params: list[Any] = []
    for name, value in where.items():
        if value is None:
            clauses.append(f"{name} IS NULL")
        else:
            clauses.append(f"{name} = {placeholder}")
            params.append(value)
    statement = f"SELECT {', '.join(columns)} FROM {qualified}"
    if clauses:
        statement += " WHERE " + " AND ".join(clauses)
    statement += " ORDER BY " + ", ".join(order_by or table.key)
    return statement, params
