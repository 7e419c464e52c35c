"""View tables described once, for every backend, and the rows one batch changes.

A projection declares its :class:`Table` s (columns, key) and, per batch, fills :class:`Changes`:
rows keyed by the table key, the last write of a key winning. A view recorder writes every change
and the tracking record in one transaction (an upsert per row): a batch lands whole or not at all.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

ColumnKind = Literal["text", "int", "real"]
Row = tuple[Any, ...]
Key = tuple[Any, ...]


@dataclass(frozen=True)
class Column:
    name: str
    kind: ColumnKind


@dataclass(frozen=True)
class Table:
    """One view table. ``key`` names the primary-key columns, which are never NULL."""

    name: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def index_of(self, column: str) -> int:
        try:
            return self.column_names.index(column)
        except ValueError:
            raise KeyError(
                f"view table {self.name!r} has no column {column!r}; it has {', '.join(self.column_names)}"
            ) from None

    @property
    def key_indexes(self) -> tuple[int, ...]:
        return tuple(self.index_of(k) for k in self.key)

    def key_of(self, row: Row) -> Key:
        return tuple(row[i] for i in self.key_indexes)


def table(name: str, key: Sequence[str], **columns: ColumnKind) -> Table:
    """``table("surface_nodes", ("session_id", "seq"), session_id="text", seq="int", ...)``."""
    return Table(name, tuple(Column(n, k) for n, k in columns.items()), tuple(key))


@dataclass
class Changes:
    """Rows to upsert, per table, keyed by primary key (the last write of a key wins)."""

    rows: dict[str, dict[Key, Row]] = field(default_factory=dict)

    def upsert(self, table_name: str, key: Key, row: Row) -> None:
        self.bucket(table_name)[key] = row

    def bucket(self, table_name: str) -> dict[Key, Row]:
        """The rows of ``table_name`` by key (assign to it to upsert)."""
        bucket = self.rows.get(table_name)
        if bucket is None:
            bucket = self.rows[table_name] = {}
        return bucket

    def for_table(self, table_name: str) -> list[Row]:
        return list(self.rows.get(table_name, {}).values())

    def __iter__(self) -> Iterator[tuple[str, list[Row]]]:
        for name, bucket in self.rows.items():
            if bucket:
                yield name, list(bucket.values())

    def __len__(self) -> int:
        return sum(len(b) for b in self.rows.values())

    def clear(self) -> None:
        self.rows.clear()
