"""In-memory views for ``memory://`` stores: eventsourcing's POPO tracking recorder + dict tables.

A write checks the tracking position first and changes nothing when it is refused, so a batch is
all or nothing here too. The views live as long as the store object they belong to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from eventsourcing.persistence import Tracking
from eventsourcing.popo import POPOTrackingRecorder

from projections.tables import Changes, Key, Row, Table
from projections.views.base import ViewRecorder


class MemoryView(POPOTrackingRecorder, ViewRecorder):
    def __init__(self, *, projection: str, tables: tuple[Table, ...]) -> None:
        super().__init__()
        self.projection_name = projection
        self.tables = tables
        self._rows: dict[str, dict[Key, Row]] = {t.name: {} for t in tables}

    def write(self, changes: Changes, tracking: Tracking) -> None:
        with self._database_lock:
            self._assert_tracking_uniqueness(tracking)
            for name, rows in changes:
                table, bucket = self.table(name), self._rows[name]
                for row in rows:
                    bucket[table.key_of(row)] = row
            self._insert_tracking(tracking)

    def drop(self, application_name: str) -> None:
        with self._database_lock:
            for bucket in self._rows.values():
                bucket.clear()
            self._max_tracking_ids.pop(application_name, None)

    def select(
        self,
        table_name: str,
        columns: Sequence[str],
        where: Mapping[str, Any] | None = None,
        order_by: Sequence[str] = (),
    ) -> list[Row]:
        table = self.table(table_name)
        conditions = [(table.index_of(n), v) for n, v in (where or {}).items()]
        picks = [table.index_of(c) for c in columns]
        order = [table.index_of(c) for c in (order_by or table.key)]
        with self._database_lock:
            found = [
                row
                for row in self._rows[table_name].values()
                if all(row[i] == v if v is not None else row[i] is None for i, v in conditions)
            ]
        found.sort(key=lambda row: tuple(row[i] for i in order))
        return [tuple(row[i] for i in picks) for row in found]

    def count(self, table_name: str) -> int:
        self.table(table_name)
        with self._database_lock:
            return len(self._rows[table_name])
