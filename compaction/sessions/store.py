"""SessionStore: the durable session log, an ``eventsourcing`` Application.

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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlparse
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import IntegrityError, Mapper, PersistenceError
from eventsourcing.sqlite import SQLiteAggregateRecorder

from compaction.errors import (
    ConcurrencyError,
    ConfigurationError,
    SessionNotFoundError,
    StoreError,
)
from compaction.sessions.events import SessionEvent
from compaction.sessions.mapper import SessionMapper, SnapshotEnvelope
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


class SessionStore(Application[UUID]):
    """The event store of sessions. Use :meth:`open`; close it when done."""

    name = "SessionStore"
    snapshot_interval = DEFAULT_SNAPSHOT_INTERVAL

    def __init__(self, env: dict[str, str] | None = None, *, location: StoreLocation | None = None):
        self.location = location or StoreLocation("memory://", "memory", dict(env or {}))
        # Settings from the URL win over the process environment.
        merged = {k: v for k, v in os.environ.items() if not k.startswith(_ES_KEYS)}
        merged.update(self.location.env)
        merged.update(env or {})
        try:
            self._init_application(merged)
        except PersistenceError as e:
            raise StoreError(f"cannot open store {self.location.display}: {e}") from e
        except Exception as e:
            if type(e).__module__.startswith(("psycopg", "sqlite3")):
                raise StoreError(f"cannot open store {self.location.display}: {e}") from e
            raise

    def _init_application(self, env: dict[str, str]) -> None:
        """``Application.__init__``, retried when another process creates the same tables at the
        same moment (PostgreSQL then reports "tuple concurrently updated" for the concurrent
        ``CREATE OR REPLACE FUNCTION``, or a duplicate ``pg_type`` row for ``CREATE TABLE``)."""
        for attempt in range(1, OPEN_ATTEMPTS + 1):
            try:
                super().__init__(env=env)
                return
            except Exception as e:
                if attempt == OPEN_ATTEMPTS or not any(m in str(e) for m in _CONCURRENT_DDL):
                    raise
                factory = getattr(self, "factory", None)
                if factory is not None:
                    with contextlib.suppress(Exception):
                        factory.close()
                time.sleep(0.05 * attempt)

    def construct_env(self, name: str, env: Any = None) -> Any:
        # Application.construct_env re-reads os.environ; ours is already merged above.
        from eventsourcing.utils import Environment

        return Environment(name, dict(env or {}))

    @classmethod
    def open(cls, url: str | None = None, *, snapshot_interval: int | None = None) -> SessionStore:
        store = cls(location=parse_store_url(url or default_url()))
        if snapshot_interval is not None:
            store.snapshot_interval = snapshot_interval
        return store

    def construct_mapper(self) -> Mapper[UUID]:
        # Through the factory, so COMPRESSOR_TOPIC and CIPHER_TOPIC settings take effect.
        return self.factory.mapper(
            transcoder=self.construct_transcoder(), mapper_class=SessionMapper
        )

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ writing

    def create(self, session_id: UUID | None = None, *, strict_structure: bool = True) -> Session:
        """A new, empty session (nothing is stored until the first :meth:`save`)."""
        return Session(session_id, strict_structure=strict_structure)

    def save(self, session: Session) -> int:  # type: ignore[override]  # sessions, not aggregates
        """Store every pending event of ``session`` in one atomic insert; return how many."""
        pending = session.pending
        if not pending:
            return 0
        mapper: SessionMapper = self.mapper  # type: ignore[assignment]
        stored = [mapper.stored_event(session.id, e) for e in pending]
        try:
            self.recorder.insert_events(stored)  # one transaction: all of them or none
        except IntegrityError as e:
            raise ConcurrencyError(session.id, pending[0].seq, pending[-1].seq) from e
        except PersistenceError as e:
            raise StoreError(
                f"session {session.id}: saving seqs {pending[0].seq}..{pending[-1].seq} failed: {e}"
            ) from e
        before = session.saved_length
        session.mark_saved()
        interval = self.snapshot_interval
        if (
            self.snapshots is not None
            and interval > 0
            and len(session) // interval > before // interval
        ):
            self.take_session_snapshot(session)
        return len(pending)

    def take_session_snapshot(self, session: Session) -> None:
        assert self.snapshots is not None
        snapshot = session.snapshot()
        # IntegrityError: another handle already snapshotted this exact version.
        with contextlib.suppress(IntegrityError):
            self.snapshots.put([SnapshotEnvelope(session.id, snapshot.length, snapshot)])

    # ------------------------------------------------------------ reading

    def load_events(
        self, session_id: UUID, lo: int = 0, hi: int | None = None
    ) -> list[SessionEvent]:
        """Stored events with ``lo <= seq < hi``, in order."""
        mapper: SessionMapper = self.mapper  # type: ignore[assignment]
        return [
            mapper.decode_row(session_id, version, topic, state)
            for version, topic, state in self._rows(session_id, lo, hi)
        ]

    def _rows(self, session_id: UUID, lo: int, hi: int | None) -> Sequence[_Row]:
        gt = lo - 1 if lo > 0 else None
        lte = None if hi is None else hi - 1
        recorder = self.recorder
        if isinstance(recorder, SQLiteAggregateRecorder):
            return _sqlite_rows(recorder, session_id, gt, lte)
        stored = recorder.select_events(session_id, gt=gt, lte=lte)
        return [(s.originator_version, s.topic, s.state) for s in stored]

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
        if self.snapshots is None:
            return None
        stored = self.snapshots.recorder.select_events(
            session_id, lte=None if at is None else at + 1, desc=True, limit=1
        )
        if not stored:
            return None
        mapper: SessionMapper = self.mapper  # type: ignore[assignment]
        return mapper.decode_snapshot(stored[0])

    def exists(self, session_id: UUID) -> bool:
        return bool(self.recorder.select_events(session_id, limit=1))

    def session_ids(self) -> list[UUID]:
        """Every session id in the store, in order of first notification."""
        return list(_distinct_ids(self))

    def iter_sessions(self) -> Iterator[Session]:
        for session_id in self.session_ids():
            yield self.get(session_id)


_ES_KEYS = ("PERSISTENCE_MODULE", "SQLITE_", "POSTGRES_", "IS_SNAPSHOTTING", "SESSIONSTORE_")


def _distinct_ids(store: SessionStore) -> Iterator[UUID]:
    """Session ids in order of their first event: one indexed query per backend (the first event of
    every session is the row with ``originator_version = 0``)."""
    recorder: Any = store.recorder
    table = getattr(recorder, "events_table_name", None)
    if table is None:  # memory://
        for stored in recorder._stored_events:
            if stored.originator_version == 0:
                yield _uuid(stored.originator_id)
        return
    statement = f"SELECT originator_id FROM {table} WHERE originator_version = 0"
    order = " ORDER BY notification_id" if store.location.kind == "postgresql" else " ORDER BY rowid"
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
