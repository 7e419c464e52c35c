"""The PostgreSQL application recorder of session stores: inserts that cannot hang.

eventsourcing's ``PostgresApplicationRecorder.insert_events`` sends ``SET LOCAL lock_timeout``,
``LOCK TABLE``, ``NOTIFY`` and the insert in psycopg's pipeline mode. With a large payload (a save
above about 5 MB) the client and the server can both end up waiting for the other: the client in
the pipeline's sync, the server in ``ClientRead`` while it holds the EXCLUSIVE table lock, so every
other writer of the store waits forever too (psycopg's known pipeline deadlock with large payloads).
eventsourcing's database-function path (``POSTGRES_ENABLE_DB_FUNCTIONS``) avoids the pipeline but
takes no table lock, so notification ids would no longer be issued in commit order, which
projections rely on.

:class:`SessionPostgresRecorder` keeps eventsourcing's contract (one transaction per save, the
EXCLUSIVE table lock so notification ids follow commit order, ``NOTIFY``, an ``IntegrityError`` on a
taken seq) and sends each statement on its own, outside pipeline mode, with the events in bounded
batches (:data:`BATCH_BYTES` of payload per ``INSERT``) inside that one transaction, so a session's
save stays atomic however large it is. ``SET LOCAL statement_timeout`` bounds every statement of the
save (:attr:`statement_timeout` seconds, the store's ``statement_timeout`` setting), and
eventsourcing's ``lock_timeout`` bounds the wait for the table lock: no save holds the table lock
indefinitely, and no writer waits for it forever. The batches are built before the transaction
begins, and the connection's ``idle_in_transaction_session_timeout`` is raised to the save's
statement bound for the save (set on the idle connection and put back after): a client too starved
to send its next statement within the server's idle timeout does not lose a large save. With
``POSTGRES_ENABLE_DB_FUNCTIONS`` set the recorder uses eventsourcing's database function instead
(no table lock; see docs/sessions.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from eventsourcing.persistence import StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from psycopg.sql import SQL, Identifier
from psycopg.types.composite import CompositeInfo, register_composite

BATCH_BYTES = 8 * 1024 * 1024
"""Payload bytes per INSERT statement (a single larger event is sent alone)."""
DEFAULT_STATEMENT_TIMEOUT = 300.0
"""Seconds any one statement of a save may run (0: no limit)."""


class QuotingPostgresDatastore(PostgresDatastore):
    """eventsourcing's datastore, looking its composite types up by quoted name. Its statements
    quote the schema (``?schema=``) as an identifier, but its type lookup joins the schema and the
    type name unquoted, so a schema that needs quotes (``Tenant-1``) could not be opened."""

    def register_type_adapters(self) -> None:
        names = [n for n in self.db_type_names if n not in self.psycopg_type_adapters]
        if not names:
            return
        with self.get_connection() as conn:
            for name in names:
                info = CompositeInfo.fetch(conn, Identifier(self.schema, name))
                if info is None:
                    continue
                register_composite(info, conn)
                self.psycopg_type_adapters[name] = info
                self.psycopg_python_types[name] = info.python_type


def quoting(datastore: PostgresDatastore) -> PostgresDatastore:
    """``datastore`` as a :class:`QuotingPostgresDatastore` (made by eventsourcing's factory, which
    offers no way to choose the class; the subclass adds no state)."""
    if type(datastore) is PostgresDatastore:
        datastore.__class__ = QuotingPostgresDatastore
    return datastore


class SessionPostgresRecorder(PostgresApplicationRecorder):
    """eventsourcing's PostgreSQL application recorder with a pipeline-free, bounded insert."""

    statement_timeout: float = DEFAULT_STATEMENT_TIMEOUT
    batch_bytes: int = BATCH_BYTES

    def __init__(self, datastore: PostgresDatastore, *args: Any, **kwargs: Any) -> None:
        super().__init__(quoting(datastore), *args, **kwargs)
        self.insert_rows_statement = SQL(
            "INSERT INTO {schema}.{table} (originator_id, originator_version, topic, state) "
            "SELECT * FROM unnest(%s::uuid[], %s::bigint[], %s::text[], %s::bytea[]) "
            "RETURNING notification_id"
        ).format(
            schema=Identifier(self.datastore.schema),
            table=Identifier(self.events_table_name),
        )

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
        if self.datastore.enable_db_functions or self.datastore.originator_id_type != "uuid":
            stock: Sequence[int] | None = super().insert_events(stored_events, **kwargs)
            return stock
        if not stored_events:
            return []
        columns = [_columns(batch) for batch in _batches(stored_events, self.batch_bytes)]
        ids: list[int] = []
        with (
            self.datastore.get_connection() as conn,
            self._save_idle_timeout(conn),
            conn.transaction(),
            conn.cursor() as curs,
        ):
            milliseconds = int(self.statement_timeout * 1000)
            curs.execute(SQL("SET LOCAL statement_timeout = {0}").format(milliseconds))
            self._insert_events(curs, stored_events, **kwargs)
            self._lock_table(curs)
            self._notify_channel(curs)
            for batch in columns:
                curs.execute(self.insert_rows_statement, batch, binary=True)
                ids.extend(row["notification_id"] for row in curs.fetchall())
        return ids

    @contextmanager
    def _save_idle_timeout(self, conn: Any) -> Iterator[None]:
        """The connection's ``idle_in_transaction_session_timeout`` raised to the save's bound
        for the save, and put back after it. Set on the idle connection, before the transaction
        begins: a client slow to send its next statement (a starved host) cannot lose the save
        to the server's idle timeout, and a hung one still cannot hold the table lock longer than
        :attr:`statement_timeout` seconds per gap."""
        configured = int(self.datastore.idle_in_transaction_session_timeout * 1000)
        during = int(self.statement_timeout * 1000)
        if configured == 0 or (during and during <= configured):
            yield  # no idle limit, or one the save's statements never come near
            return
        statement = "SET idle_in_transaction_session_timeout = {0}"
        conn.execute(SQL(statement).format(during))
        try:
            yield
        finally:
            if not conn.closed:
                conn.execute(SQL(statement).format(configured))


def _columns(batch: Sequence[StoredEvent]) -> tuple[list[Any], list[int], list[str], list[bytes]]:
    """A batch as the INSERT's four array parameters."""
    return (
        [e.originator_id for e in batch],
        [e.originator_version for e in batch],
        [e.topic for e in batch],
        [e.state for e in batch],
    )


def _batches(events: Sequence[StoredEvent], limit: int) -> Iterator[Sequence[StoredEvent]]:
    """Consecutive slices of ``events`` holding at most ``limit`` payload bytes (at least one
    event each)."""
    start = size = 0
    for index, event in enumerate(events):
        if index > start and size + len(event.state) > limit:
            yield events[start:index]
            start, size = index, 0
        size += len(event.state)
    if start < len(events):
        yield events[start:]


TOPIC = f"{__name__}:{SessionPostgresRecorder.__name__}"
