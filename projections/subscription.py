"""Reading the store's notification log in batches, and waiting for more.

eventsourcing's SQLite application recorder has no ``subscribe()``; :class:`PollingSubscription`
is one for every backend: it selects the notifications after a position in batches (``>`` on the
notification id, since ids can skip after a rejected insert) and, when the log is exhausted, waits
for the next append: PostgreSQL ``LISTEN`` on the store's channel, the in-memory recorder's
listeners, or plain polling for SQLite. It is an eventsourcing ``Subscription`` (an iterator of
``Notification`` objects that blocks until stopped); projection runners use its batch interface,
which returns bare rows to keep rebuilds cheap.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any, Self
from uuid import UUID

from eventsourcing.persistence import ApplicationRecorder, Notification, Subscription
from eventsourcing.popo import POPOApplicationRecorder
from eventsourcing.postgres import PostgresApplicationRecorder
from eventsourcing.sqlite import SQLiteApplicationRecorder
from psycopg.rows import tuple_row
from psycopg.sql import SQL, Identifier

StoredRow = tuple[int, Any, int, str, bytes]
"""``(notification id, originator id, originator version, topic, state)``."""

DEFAULT_POLL_INTERVAL = 0.5
_SLICE = 0.1  # the longest a wait blocks before looking at the stop flag again


class NotificationReader(ABC):
    """Selects stored rows with notification ids greater than a position."""

    @abstractmethod
    def read(self, after: int, limit: int) -> list[StoredRow]: ...

    def wait(self, timeout: float, stop: threading.Event) -> None:
        """Return after ``timeout`` seconds, or sooner when ``stop`` is set (or new rows land)."""
        stop.wait(timeout)

    def close(self) -> None:  # noqa: B027  (optional hook; most readers hold nothing)
        """Release whatever the reader holds."""


class SQLiteReader(NotificationReader):
    """Raw rows straight from the recorder's connection pool: no per-row objects."""

    def __init__(self, recorder: SQLiteApplicationRecorder) -> None:
        self.recorder = recorder
        self.statement = (
            "SELECT rowid, originator_id, originator_version, topic, state "
            f"FROM {recorder.events_table_name} WHERE rowid > ? ORDER BY rowid LIMIT ?"
        )

    def read(self, after: int, limit: int) -> list[StoredRow]:
        with self.recorder.datastore.transaction(commit=False) as cursor:
            raw = cursor.sqlite_cursor
            raw.row_factory = None
            raw.execute(self.statement, (after, limit))
            rows: list[StoredRow] = raw.fetchall()
            return rows


class PostgresReader(NotificationReader):
    """Rows as tuples from the recorder's pool; waits with ``LISTEN`` on the store's channel."""

    def __init__(self, recorder: PostgresApplicationRecorder) -> None:
        self.recorder = recorder
        schema = Identifier(recorder.datastore.schema)
        table = Identifier(recorder.events_table_name)
        self.statement = SQL(
            "SELECT notification_id, originator_id, originator_version, topic, state "
            "FROM {0}.{1} WHERE notification_id > %s ORDER BY notification_id LIMIT %s"
        ).format(schema, table)
        self._listening: ExitStack | None = None
        self._connection: Any = None

    def read(self, after: int, limit: int) -> list[StoredRow]:
        with (
            self.recorder.datastore.get_connection() as conn,
            conn.cursor(row_factory=tuple_row) as cursor,
        ):
            cursor.execute(self.statement, (after, limit), prepare=True)
            return [(r[0], r[1], r[2], r[3], bytes(r[4])) for r in cursor.fetchall()]

    def wait(self, timeout: float, stop: threading.Event) -> None:
        connection = self._listen()
        deadline = time.monotonic() + timeout
        while not stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            for _ in connection.notifies(timeout=min(_SLICE, remaining), stop_after=1):
                return

    def _listen(self) -> Any:
        if self._connection is None:
            stack = ExitStack()
            connection = stack.enter_context(self.recorder.datastore.get_connection())
            connection.execute(SQL("LISTEN {0}").format(Identifier(self.recorder.channel_name)))
            self._listening, self._connection = stack, connection
        return self._connection

    def close(self) -> None:
        if self._listening is not None:
            self._connection.execute(SQL("UNLISTEN *"))
            self._listening.close()
            self._listening = self._connection = None


class RecorderReader(NotificationReader):
    """Any application recorder, through ``select_notifications`` (used for the in-memory store)."""

    def __init__(self, recorder: ApplicationRecorder) -> None:
        self.recorder = recorder
        self._notified = threading.Event()
        if isinstance(recorder, POPOApplicationRecorder):
            recorder.listen(self._notified)

    def read(self, after: int, limit: int) -> list[StoredRow]:
        found = self.recorder.select_notifications(
            start=after, limit=limit, inclusive_of_start=False
        )
        return [(n.id, n.originator_id, n.originator_version, n.topic, n.state) for n in found]

    def wait(self, timeout: float, stop: threading.Event) -> None:
        deadline = time.monotonic() + timeout
        while not stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            if self._notified.wait(min(_SLICE, remaining)):
                self._notified.clear()
                return

    def close(self) -> None:
        if isinstance(self.recorder, POPOApplicationRecorder):
            self.recorder.unlisten(self._notified)


def reader_for(recorder: ApplicationRecorder) -> NotificationReader:
    if isinstance(recorder, SQLiteApplicationRecorder):
        return SQLiteReader(recorder)
    if isinstance(recorder, PostgresApplicationRecorder):
        return PostgresReader(recorder)
    return RecorderReader(recorder)


class PollingSubscription(Subscription[ApplicationRecorder]):
    """Notifications after ``gt``, in batches; blocks (polling or listening) until :meth:`stop`."""

    def __init__(
        self,
        recorder: ApplicationRecorder,
        gt: int | None = None,
        topics: Sequence[str] = (),
        *,
        batch_size: int = 500,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> None:
        super().__init__(recorder=recorder, gt=gt, topics=topics)
        self.reader = reader_for(recorder)
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        self.position = gt or 0
        self._stopped = threading.Event()
        self._buffer: list[StoredRow] = []

    def next_batch(self, limit: int | None = None) -> list[StoredRow]:
        """The next stored rows after the position (possibly none); advances the position."""
        rows = self.reader.read(self.position, limit or self.batch_size)
        if rows:
            self.position = rows[-1][0]
        if self._topics:
            rows = [r for r in rows if r[3] in self._topics]
        return rows

    def wait(self, timeout: float | None = None) -> None:
        """Block until more rows may be there (an append was announced, or the poll interval)."""
        self.reader.wait(self.poll_interval if timeout is None else timeout, self._stopped)

    def stop(self) -> None:
        super().stop()
        self._stopped.set()

    @property
    def stopped(self) -> threading.Event:
        return self._stopped

    def __next__(self) -> Notification:
        while not self._buffer:
            if self._stopped.is_set():
                raise StopIteration
            before = self.position
            self._buffer = self.next_batch()
            if not self._buffer and self.position == before:
                self.wait()
        row = self._buffer.pop(0)
        originator_id = row[1] if isinstance(row[1], UUID) else UUID(str(row[1]))
        return Notification(
            id=row[0], originator_id=originator_id, originator_version=row[2], topic=row[3],
            state=row[4],
        )

    def close(self) -> None:
        self.reader.close()

    def __exit__(self, *args: object, **kwargs: Any) -> None:
        try:
            super().__exit__(*args, **kwargs)
        finally:
            self.close()

    def __enter__(self) -> Self:
        super().__enter__()
        return self
