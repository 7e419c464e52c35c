"""SessionStore: the durable session log, and the only way to its stored rows.

The store holds an ``eventsourcing`` Application (:class:`SessionApplication`) as a field; it is
not one (sessions are not aggregates, so the application's ``save`` and ``repository`` do not
apply). Everything that reads stored rows goes through the store's methods: sessions and events
(strict, or tolerant with :class:`~compaction.sessions.mapper.UnreadableRow` records), stream
lengths, and the notification log (decoded batches, or a blocking feed over the recorder's
eventsourcing ``subscribe()``; SQLite gets a polling one, :mod:`compaction.sessions.polling`).

``SessionStore.open(url)`` takes ``sqlite:///PATH`` (the default,
``sqlite:///./.compaction/sessions.db``, or ``$COMPACTION_STORE``),
``postgresql://USER[:PASSWORD]@HOST:PORT/DB`` or ``memory://``.

Each session is one stream: ``originator_id`` is the session id and ``originator_version`` is the
event's ``seq``. Payloads are msgspec JSON (see :mod:`compaction.sessions.mapper`). All pending events of a
session are saved in one atomic insert; a concurrent writer that got there first makes the save fail
with :class:`~compaction.errors.ConcurrencyError` and nothing of it is stored. Snapshots of the fold
state are taken every ``snapshot_interval`` events so loading a long session stays cheap.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qsl, unquote, urlparse
from uuid import UUID

import msgspec
from eventsourcing.application import Application
from eventsourcing.persistence import (
    ApplicationRecorder,
    IntegrityError,
    Mapper,
    PersistenceError,
    Subscription,
)
from eventsourcing.popo import POPOApplicationRecorder
from eventsourcing.sqlite import SQLiteAggregateRecorder, SQLiteApplicationRecorder

from compaction.errors import (
    ConcurrencyError,
    ConfigurationError,
    EventCompactionError,
    SessionNotFoundError,
    StoreError,
    UnreadableRowError,
)
from compaction.sessions.events import SessionEvent
from compaction.sessions.mapper import SessionMapper, SnapshotEnvelope, StoredRow
from compaction.sessions.polling import (
    POLLING_SQLITE_RECORDER_TOPIC,
    PollingRecorder,
    PollingSubscription,
)
from compaction.sessions.session import Session, SessionSnapshot

DEFAULT_URL = "sqlite:///./.compaction/sessions.db"
DEFAULT_SNAPSHOT_INTERVAL = 1000
OPEN_ATTEMPTS = 5
_CONCURRENT_DDL = ("tuple concurrently updated", "pg_type_typname_nsp_index")


def default_url() -> str:
    return os.environ.get("COMPACTION_STORE") or DEFAULT_URL


@dataclass(frozen=True)
class StoreLocation:
    """A parsed store URL and the eventsourcing environment it stands for."""

    url: str
    kind: str  # memory | sqlite | postgresql
    env: dict[str, str]

    @property
    def display(self) -> str:
        parsed = urlparse(self.url)
        if parsed.password:
            return self.url.replace(f":{parsed.password}@", ":***@")
        return self.url


def parse_store_url(url: str) -> StoreLocation:
    parsed = urlparse(url)
    named = [k for k, _ in parse_qsl(parsed.query) if k in ("partitions", "notify")]
    if named:  # a PartitionedSessionStore: compaction.sessions.partitioned.open_store
        raise ConfigurationError(
            f"store URL {url!r} has partitioned-store options ({', '.join(named)}), but this opens "
            "a single store; open it with compaction.sessions.partitioned.open_store (the copy command "
            "accepts it)"
        )
    env = {"IS_SNAPSHOTTING_ENABLED": "y"}
    if parsed.scheme == "memory":
        env["PERSISTENCE_MODULE"] = "eventsourcing.popo"
        return StoreLocation(url, "memory", env)
    if parsed.scheme == "sqlite":
        # sqlite:///PATH: PATH is everything after the third slash (sqlite:///./x.db is
        # relative, sqlite:////var/x.db absolute).
        raw = unquote(url[len("sqlite://") :])
        path = raw[1:] if raw.startswith("/") else ""
        if not path:
            raise ConfigurationError(
                f"store URL {url!r} has no database path; expected sqlite:///PATH, for example "
                f"{DEFAULT_URL}"
            )
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        env |= {
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": path,
            "SQLITE_LOCK_TIMEOUT": "10",
        }
        return StoreLocation(url, "sqlite", env)
    if parsed.scheme in ("postgresql", "postgres"):
        if not parsed.hostname or not parsed.path.strip("/"):
            raise ConfigurationError(
                f"store URL {url!r} needs a host and a database; expected "
                "postgresql://USER@HOST:PORT/DB"
            )
        env |= {
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": parsed.path.strip("/"),
            "POSTGRES_HOST": parsed.hostname,
            "POSTGRES_PORT": str(parsed.port or 5432),
            "POSTGRES_USER": unquote(parsed.username or "postgres"),
            "POSTGRES_PASSWORD": unquote(parsed.password or ""),
            "POSTGRES_POOL_SIZE": "4",
            "POSTGRES_LOCK_TIMEOUT": "10",
            "POSTGRES_CONNECT_TIMEOUT": "5",
        }
        return StoreLocation(url, "postgresql", env)
    raise ConfigurationError(
        f"unsupported store URL {url!r}: expected sqlite:///PATH, postgresql://USER@HOST:PORT/DB "
        "or memory://"
    )


class SessionApplication(Application[UUID]):
    """The eventsourcing application a :class:`SessionStore` holds (a field, not its base class:
    the application's ``save`` and ``repository`` speak of aggregates, which sessions are not)."""

    def __init__(self, name: str, env: dict[str, str]) -> None:
        self.name = name
        try:
            super().__init__(env=env)
        except BaseException:
            factory = getattr(self, "factory", None)
            if factory is not None:
                with contextlib.suppress(Exception):
                    factory.close()
            raise

    def construct_env(self, name: str, env: Any = None) -> Any:
        # Application.construct_env re-reads os.environ; the store has merged it already.
        from eventsourcing.utils import Environment

        return Environment(name, dict(env or {}))

    def construct_mapper(self) -> Mapper[UUID]:
        # Through the factory, so COMPRESSOR_TOPIC and CIPHER_TOPIC settings take effect.
        return self.factory.mapper(
            transcoder=self.construct_transcoder(), mapper_class=SessionMapper
        )


class StoredNotification(msgspec.Struct, frozen=True):
    """One decoded row of the store's notification log."""

    notification_id: int
    session_id: UUID
    event: SessionEvent


class SessionStore:
    """The event store of sessions. Use :meth:`open`; close it when done.

    The only way to stored rows: sessions (:meth:`get`), events (:meth:`load_events`, tolerantly
    :meth:`read_rows`), stream lengths, and the notification log (:meth:`notifications`,
    :meth:`follow`). The eventsourcing application is the field :attr:`application`; nothing
    outside this module reaches into it (tests that tamper with rows on purpose excepted).
    """

    name = "SessionStore"
    snapshot_interval = DEFAULT_SNAPSHOT_INTERVAL

    def __init__(self, env: dict[str, str] | None = None, *, location: StoreLocation | None = None):
        self.location = location or StoreLocation("memory://", "memory", dict(env or {}))
        # Settings from the URL win over the process environment.
        merged = {k: v for k, v in os.environ.items() if not k.startswith(_ES_KEYS)}
        merged.update(self.location.env)
        merged.update(env or {})
        if merged.get("PERSISTENCE_MODULE") == "eventsourcing.sqlite":
            merged.setdefault("APPLICATION_RECORDER_TOPIC", POLLING_SQLITE_RECORDER_TOPIC)
        self.settings: Mapping[str, str] = MappingProxyType(merged)
        try:
            self.application = _open_application(self.name, merged)
        except PersistenceError as e:
            raise StoreError(f"cannot open store {self.location.display}: {e}") from e
        except Exception as e:
            if type(e).__module__.startswith(("psycopg", "sqlite3")):
                raise StoreError(f"cannot open store {self.location.display}: {e}") from e
            raise
        mapper = self.application.mapper
        assert isinstance(mapper, SessionMapper)
        self._mapper = mapper
        self._recorder = self.application.recorder
        self._ids: dict[object, UUID] = {}

    @classmethod
    def open(cls, url: str | None = None, *, snapshot_interval: int | None = None) -> SessionStore:
        store = cls(location=parse_store_url(url or default_url()))
        if snapshot_interval is not None:
            store.snapshot_interval = snapshot_interval
        return store

    @property
    def backend(self) -> str:
        """``sqlite``, ``postgresql`` or ``memory``: the kind of database the rows are in (the
        recorder's class name for any other)."""
        from eventsourcing.postgres import PostgresApplicationRecorder

        recorder = self._recorder
        if isinstance(recorder, SQLiteApplicationRecorder):
            return "sqlite"
        if isinstance(recorder, PostgresApplicationRecorder):
            return "postgresql"
        if isinstance(recorder, POPOApplicationRecorder):
            return "memory"
        return type(recorder).__qualname__

    def close(self) -> None:
        self.application.close()

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ writing

    def create(self, session_id: UUID | None = None, *, strict_structure: bool = True) -> Session:
        """A new, empty session (nothing is stored until the first :meth:`save`)."""
        return Session(session_id, strict_structure=strict_structure)

    def save(self, session: Session) -> int:
        """Store every pending event of ``session`` in one atomic insert; return how many."""
        pending = session.pending
        if not pending:
            return 0
        self.append_events(session.id, pending)
        before = session.saved_length
        session.mark_saved()
        interval = self.snapshot_interval
        if (
            self.application.snapshots is not None
            and interval > 0
            and len(session) // interval > before // interval
        ):
            self.take_session_snapshot(session)
        return len(pending)

    def append_events(self, session_id: UUID, events: Sequence[SessionEvent]) -> None:
        """Store ``events`` (consecutive seqs) in one atomic insert, without the session's append
        rules (store-to-store copies); :class:`ConcurrencyError` when a seq is already taken."""
        if not events:
            return
        stored = [self._mapper.stored_event(session_id, e) for e in events]
        try:
            self._recorder.insert_events(stored)  # one transaction: all of them or none
        except IntegrityError as e:
            raise ConcurrencyError(session_id, events[0].seq, events[-1].seq) from e
        except PersistenceError as e:
            raise StoreError(
                f"session {session_id}: saving seqs {events[0].seq}..{events[-1].seq} failed: {e}"
            ) from e

    def take_session_snapshot(self, session: Session) -> None:
        snapshots = self.application.snapshots
        if snapshots is None:
            return
        snapshot = session.snapshot()
        # IntegrityError: another handle already snapshotted this exact version.
        with contextlib.suppress(IntegrityError):
            snapshots.put([SnapshotEnvelope(session.id, snapshot.length, snapshot)])

    # ------------------------------------------------------------ reading

    def load_events(
        self, session_id: UUID, lo: int = 0, hi: int | None = None
    ) -> list[SessionEvent]:
        """Stored events with ``lo <= seq < hi``, in order; a row that does not decode raises."""
        decode = self._mapper.decode_row
        return [
            decode(session_id, version, topic, state)
            for version, topic, state in self._rows(session_id, lo, hi)
        ]

    def read_rows(self, session_id: UUID, lo: int = 0, hi: int | None = None) -> list[StoredRow]:
        """Stored rows with ``lo <= seq < hi`` in seq order, read tolerantly: each is its event,
        or an :class:`UnreadableRow` naming the seq, the type and why it does not decode (a
        damaged log stays readable; missing seqs are simply absent)."""
        read = self._mapper.read_row
        return [
            read(session_id, version, topic, state)
            for version, topic, state in self._rows(session_id, lo, hi)
        ]

    def stream_length(self, session_id: UUID) -> int:
        """1 + the highest stored seq of the session (0 when it has no stored row)."""
        last = self._recorder.select_events(session_id, desc=True, limit=1)
        return last[0].originator_version + 1 if last else 0

    def _rows(self, session_id: UUID, lo: int, hi: int | None) -> Sequence[_Row]:
        gt = lo - 1 if lo > 0 else None
        lte = None if hi is None else hi - 1
        recorder = self._recorder
        if isinstance(recorder, SQLiteAggregateRecorder):
            return _sqlite_rows(recorder, session_id, gt, lte)
        stored = recorder.select_events(session_id, gt=gt, lte=lte)
        return [(s.originator_version, s.topic, s.state) for s in stored]

    # ------------------------------------------------------------ the notification log

    def max_notification_id(self) -> int:
        """The id of the last notification (0 when the log is empty)."""
        return self._recorder.max_notification_id() or 0

    def notifications(
        self, after: int, limit: int, *, topics: Sequence[str] = (), upto: int | None = None
    ) -> list[StoredNotification]:
        """Up to ``limit`` decoded notifications with ``after < id (<= upto)``, in order, only of
        ``topics`` when given; a row that does not decode raises :class:`UnreadableRowError`."""
        if not topics and upto is None:
            rows = _notification_rows(self._recorder, after, limit)
        else:
            found = self._recorder.select_notifications(
                start=after, limit=limit, stop=upto, topics=topics, inclusive_of_start=False
            )
            rows = [(n.id, n.originator_id, n.originator_version, n.topic, n.state) for n in found]
        return [self._notification(*row) for row in rows]

    def follow(self, after: int = 0, *, poll_interval: float | None = None) -> NotificationFeed:
        """Decoded notifications after ``after``, blocking for new ones until stopped: the
        recorder's eventsourcing subscription (``LISTEN`` on PostgreSQL, the in-memory
        recorder's listeners, polling for SQLite and unannounced partitions)."""
        recorder = self._recorder
        if poll_interval is not None and isinstance(recorder, PollingRecorder):
            subscription: Subscription[Any] = PollingSubscription(
                recorder, after, poll_interval=poll_interval
            )
        else:
            subscription = recorder.subscribe(gt=after)
        return NotificationFeed(subscription, self._notification)

    def _notification(
        self, notification_id: int, originator_id: object, version: int, topic: str, state: bytes
    ) -> StoredNotification:
        session_id = self._ids.get(originator_id) or self._session_id(originator_id)
        try:
            event = self._mapper.decode_row(session_id, version, topic, state)
        except EventCompactionError as e:
            raise UnreadableRowError(session_id, version, notification_id, topic, str(e)) from e
        return StoredNotification(notification_id, session_id, event)

    def _session_id(self, originator_id: object) -> UUID:
        if len(self._ids) > _MAX_CACHED_IDS:
            self._ids.clear()
        session_id = self._ids[originator_id] = _uuid(originator_id)
        return session_id

    def get(
        self,
        session_id: UUID,
        *,
        at: int | None = None,
        use_snapshots: bool = True,
        strict_structure: bool = True,
    ) -> Session:
        """Load a session, optionally as it was right after event ``at``."""
        if at is not None and at < 0:
            raise StoreError(f"session {session_id}: cannot load it at seq {at}; seqs start at 0")
        session = self._load(session_id, at, use_snapshots, strict_structure)
        if at is not None and len(session) <= at:
            raise StoreError(
                f"session {session_id} has {len(session)} events (seqs 0..{len(session) - 1}); "
                f"cannot load it at seq {at}"
            )
        return session

    def _load(
        self, session_id: UUID, at: int | None, use_snapshots: bool, strict_structure: bool
    ) -> Session:
        snapshot = self._latest_snapshot(session_id, at) if use_snapshots else None
        if snapshot is None:
            events = self.load_events(session_id, 0, None if at is None else at + 1)
            if not events:
                raise SessionNotFoundError(session_id)
            return Session.replay(session_id, events, strict_structure=strict_structure)

        def loader(lo: int, hi: int) -> Sequence[SessionEvent]:
            return self.load_events(session_id, lo, hi)

        session = Session.from_snapshot(
            session_id, snapshot, loader, strict_structure=strict_structure
        )
        for event in self.load_events(session_id, snapshot.length, None if at is None else at + 1):
            session.append(event)
        session.mark_saved()
        return session

    def _latest_snapshot(self, session_id: UUID, at: int | None) -> SessionSnapshot | None:
        snapshots = self.application.snapshots
        if snapshots is None:
            return None
        stored = snapshots.recorder.select_events(
            session_id, lte=None if at is None else at + 1, desc=True, limit=1
        )
        if not stored:
            return None
        return self._mapper.decode_snapshot(stored[0])

    def exists(self, session_id: UUID) -> bool:
        return bool(self._recorder.select_events(session_id, limit=1))

    def session_ids(self) -> list[UUID]:
        """Every session id in the store, in order of first notification."""
        return list(_distinct_ids(self._recorder, self.backend))

    def iter_sessions(self) -> Iterator[Session]:
        for session_id in self.session_ids():
            yield self.get(session_id)


_ES_KEYS = ("PERSISTENCE_MODULE", "SQLITE_", "POSTGRES_", "IS_SNAPSHOTTING", "SESSIONSTORE_")


def _distinct_ids(recorder: Any, kind: str) -> Iterator[UUID]:
    """Session ids in order of their first event: one indexed query per backend (the first event of
    every session is the row with ``originator_version = 0``)."""
    table = getattr(recorder, "events_table_name", None)
    if table is None:  # memory://
        for stored in recorder._stored_events:
            if stored.originator_version == 0:
                yield _uuid(stored.originator_id)
        return
    statement = f"SELECT originator_id FROM {table} WHERE originator_version = 0"
    order = " ORDER BY notification_id" if kind == "postgresql" else " ORDER BY rowid"
    with recorder.datastore.transaction(commit=False) as cursor:
        cursor.execute(statement + order)
        rows = cursor.fetchall()
    for row in rows:
        yield _uuid(row["originator_id"])


def _uuid(value: object) -> UUID:
    return value if isinstance(value, UUID) else UUID(str(value))


_Row = tuple[int, str, bytes]  # originator_version, topic, state


def _sqlite_rows(
    recorder: SQLiteAggregateRecorder, session_id: UUID, gt: int | None, lte: int | None
) -> list[_Row]:
    """Plain tuples straight from sqlite3: the stock ``select_events`` builds a ``sqlite3.Row``,
    a ``StoredEvent`` and a ``UUID`` per row, which costs more than decoding the payload."""
    statement = (
        "SELECT originator_version, topic, state FROM "
        f"{recorder.events_table_name} WHERE originator_id=? "
    )
    params: list[object] = [session_id.hex]
    if gt is not None:
        statement += "AND originator_version>? "
        params.append(gt)
    if lte is not None:
        statement += "AND originator_version<=? "
        params.append(lte)
    statement += "ORDER BY originator_version ASC"
    with recorder.datastore.transaction(commit=False) as cursor:
        cursor.sqlite_cursor.row_factory = None
        cursor.execute(statement, params)
        rows: list[_Row] = cursor.fetchall()
    return rows


_Notified = tuple[int, Any, int, str, bytes]  # notification id, originator id, version, topic, state
_MAX_CACHED_IDS = 100_000


def _notification_rows(recorder: ApplicationRecorder, after: int, limit: int) -> list[_Notified]:
    """Bare rows of the notification log after ``after``: plain tuples from SQLite and PostgreSQL
    (a rebuild reads every row, and per-row ``Notification`` objects cost more than decoding)."""
    from eventsourcing.postgres import PostgresApplicationRecorder

    if isinstance(recorder, SQLiteApplicationRecorder):
        return _sqlite_notifications(recorder, after, limit)
    if isinstance(recorder, PostgresApplicationRecorder):
        return _postgres_notifications(recorder, after, limit)
    found = recorder.select_notifications(start=after, limit=limit, inclusive_of_start=False)
    return [(n.id, n.originator_id, n.originator_version, n.topic, n.state) for n in found]


def _sqlite_notifications(
    recorder: SQLiteApplicationRecorder, after: int, limit: int
) -> list[_Notified]:
    statement = (
        "SELECT rowid, originator_id, originator_version, topic, state "
        f"FROM {recorder.events_table_name} WHERE rowid > ? ORDER BY rowid LIMIT ?"
    )
    with recorder.datastore.transaction(commit=False) as cursor:
        raw = cursor.sqlite_cursor
        raw.row_factory = None
        raw.execute(statement, (after, limit))
        rows: list[_Notified] = raw.fetchall()
    return rows


def _postgres_notifications(recorder: Any, after: int, limit: int) -> list[_Notified]:
    from psycopg.rows import tuple_row
    from psycopg.sql import SQL, Identifier

    statement = SQL(
        "SELECT notification_id, originator_id, originator_version, topic, state "
        "FROM {0}.{1} WHERE notification_id > %s ORDER BY notification_id LIMIT %s"
    ).format(Identifier(recorder.datastore.schema), Identifier(recorder.events_table_name))
    with (
        recorder.datastore.get_connection() as conn,
        conn.cursor(row_factory=tuple_row) as cursor,
    ):
        cursor.execute(statement, (after, limit), prepare=True)
        return [(r[0], r[1], r[2], r[3], bytes(r[4])) for r in cursor.fetchall()]


class NotificationFeed:
    """Decoded notifications from an eventsourcing subscription of the store's recorder: an
    iterator that blocks until the next notification is stored, and ends once :meth:`stop` is
    called (from any thread). Use it as a context manager."""

    def __init__(
        self,
        subscription: Subscription[Any],
        decode: Callable[[int, object, int, str, bytes], StoredNotification],
    ) -> None:
        self.subscription = subscription
        self._decode = decode

    def __iter__(self) -> NotificationFeed:
        return self

    def __next__(self) -> StoredNotification:
        n = next(self.subscription)
        return self._decode(n.id, n.originator_id, n.originator_version, n.topic, n.state)

    def stop(self) -> None:
        self.subscription.stop()

    def __enter__(self) -> NotificationFeed:
        self.subscription.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.subscription.__exit__(*exc)


def _open_application(name: str, env: dict[str, str]) -> SessionApplication:
    """The application, retried when another process creates the same tables at the same moment
    (PostgreSQL then reports "tuple concurrently updated" for the concurrent ``CREATE OR REPLACE
    FUNCTION``, or a duplicate ``pg_type`` row for ``CREATE TABLE``)."""
    for attempt in range(1, OPEN_ATTEMPTS + 1):
        try:
            return SessionApplication(name, env)
        except Exception as e:
            if attempt == OPEN_ATTEMPTS or not any(m in str(e) for m in _CONCURRENT_DDL):
                raise
            time.sleep(0.05 * attempt)
    raise AssertionError("unreachable")  # pragma: no cover
