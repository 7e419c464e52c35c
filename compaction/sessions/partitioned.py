"""A session store split into K partitions, so appends are not serialised behind one table lock.

eventsourcing's PostgreSQL recorder takes ``LOCK TABLE ... IN EXCLUSIVE MODE`` on every insert into
an application's events table, so that notification ids are issued in commit order; the lock is held
until the commit, so it serialises every append of one application, whichever session it belongs
to. :class:`PartitionedSessionStore` opens K :class:`~compaction.sessions.store.SessionStore` applications on
the same database under distinct names (``SessionStore_p0`` ... so tables ``sessionstore_p0_events``
...) and routes each session, by a stable hash of its id, to exactly one of them. Appends to
different partitions run in parallel; everything projections rely on still holds per partition: a
session's events all live in one notification log, in seq order, and each partition's log is in
commit order with its own tracking records (one projection runner per partition).

The recorder also sends a ``NOTIFY`` with every append, and PostgreSQL serialises the commits of
all transactions that notified, server-wide (``PreCommit_Notify`` in its ``async.c``). With
``notify=off`` the partitions append without it (:class:`UnannouncedPostgresRecorder`) and readers
poll; see ``docs/scaling.md`` for what each costs.

URL forms: ``postgresql://USER@HOST:PORT/DB?partitions=K[&notify=off]`` (``memory://?partitions=K``
in tests). :func:`open_store` returns a plain :class:`SessionStore` when the URL names no partitions
(or ``partitions=1`` with notifications on). K is part of the database's layout: opening a database
with another K than it was written with is refused (to change K, ``compaction copy`` into a fresh
database opened with the new K). ``notify`` is not part of the layout.
"""

from __future__ import annotations

import hashlib
from collections.abc import Container, Iterator, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode
from uuid import UUID, uuid4

from compaction.errors import ConfigurationError, StoreError
from compaction.sessions.events import SessionEvent
from compaction.sessions.ids import SessionKey, session_uuid
from compaction.sessions.mapper import StoredRow
from compaction.sessions.pgrecorder import SessionPostgresRecorder
from compaction.sessions.polling import PollingRecorder
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore, StoreLocation, parse_store_url

PARTITIONS_PARAM = "partitions"
NOTIFY_PARAM = "notify"
MAX_PARTITIONS = 64
PARTITION_NAME = "SessionStore_p{index}"
# Each partition keeps one pooled connection and grows on demand: K pools of the single store's
# size would exhaust PostgreSQL's max_connections with a handful of worker processes.
_PARTITION_POOL = {"POSTGRES_POOL_SIZE": "1", "POSTGRES_MAX_OVERFLOW": "3"}
_SWITCH = {"on": True, "off": False}


def split_partitions(url: str) -> tuple[str, int]:
    """``(url without the partitions parameter, K)``; K is 1 when the URL does not name it."""
    base, values = _pop_param(url, PARTITIONS_PARAM)
    return (base, _partition_count(url, values)) if values else (url, 1)


def split_options(url: str) -> tuple[str, int | None, bool]:
    """``(store URL, K or None when not given, notify)`` from ``...?partitions=K&notify=on|off``."""
    base, values = _pop_param(url, PARTITIONS_PARAM)
    base, switches = _pop_param(base, NOTIFY_PARAM)
    partitions = _partition_count(url, values) if values else None
    if len(switches) > 1 or (switches and switches[0] not in _SWITCH):
        raise ConfigurationError(
            f"store URL {url!r}: expected {NOTIFY_PARAM}=on or {NOTIFY_PARAM}=off, found "
            f"{NOTIFY_PARAM}={'&'.join(switches)!r}"
        )
    notify = _SWITCH[switches[0]] if switches else True
    if partitions is None and not notify:
        raise ConfigurationError(
            f"store URL {url!r}: {NOTIFY_PARAM}=off is an option of partitioned stores; add "
            f"{PARTITIONS_PARAM}=K"
        )
    return base, partitions, notify


def _pop_param(url: str, name: str) -> tuple[str, list[str]]:
    head, _, query = url.partition("?")  # not urlunparse: it drops the "//" of sqlite:///PATH
    pairs = parse_qsl(query, keep_blank_values=True)
    values = [v for k, v in pairs if k == name]
    if not values:
        return url, []
    rest = urlencode([(k, v) for k, v in pairs if k != name])
    return (f"{head}?{rest}" if rest else head), values


def _partition_count(url: str, values: list[str]) -> int:
    text = values[-1]
    if len(values) > 1 or not text.isdigit() or not 1 <= int(text) <= MAX_PARTITIONS:
        raise ConfigurationError(
            f"store URL {url!r}: expected one {PARTITIONS_PARAM}=K with K an integer in "
            f"1..{MAX_PARTITIONS}, found {PARTITIONS_PARAM}={'&'.join(values)!r}"
        )
    return int(text)


def partition_of(session_id: UUID, partitions: int) -> int:
    """The partition a session lives in: blake2b of the id's bytes, modulo K (stable everywhere,
    unlike ``hash()``; uniform even for uuid1/uuid5 ids whose low bits are not random)."""
    digest = hashlib.blake2b(session_id.bytes, digest_size=8).digest()
    return int.from_bytes(digest, "big") % partitions


class UnannouncedPostgresRecorder(PollingRecorder, SessionPostgresRecorder):
    """Appends without ``NOTIFY``. PostgreSQL serialises the commits of every transaction that
    issued a NOTIFY, server-wide (a lock held from pre-commit until after the WAL flush), so a
    NOTIFY per append would serialise the partitions' commits again. Readers poll instead (its
    ``subscribe()`` is a :class:`~compaction.sessions.polling.PollingSubscription`, which waits at
    most its poll interval); the table lock, and so commit-ordered notification ids per
    partition, stays."""

    def _notify_channel(self, curs: Any) -> None:
        return None


class PartitionStore(SessionStore):
    """One partition: a SessionStore application with its own name, tables and notification log."""

    def __init__(self, index: int, location: StoreLocation) -> None:
        self.name = PARTITION_NAME.format(index=index)
        self.index = index
        super().__init__(location=location)


class PartitionedSessionStore:
    """K session stores on one database behind the public methods of :class:`SessionStore`."""

    def __init__(self, location: StoreLocation, partitions: int, *, notify: bool = True) -> None:
        if location.kind == "sqlite":
            raise ConfigurationError(
                f"store URL {location.display!r}: partitions need PostgreSQL (or memory:// in "
                "tests); SQLite has one writer per database file, so partitioning cannot help"
            )
        joiner = "&" if "?" in location.url else "?"
        options = f"{PARTITIONS_PARAM}={partitions}" + ("" if notify else f"&{NOTIFY_PARAM}=off")
        self.location = StoreLocation(f"{location.url}{joiner}{options}", location.kind, location.env)
        self.partitions = partitions
        self.notify = notify
        env = dict(location.env)
        if location.kind == "postgresql":
            _check_layout(location, partitions)
            env |= _PARTITION_POOL
            if not notify:
                env["APPLICATION_RECORDER_TOPIC"] = f"{__name__}:{UnannouncedPostgresRecorder.__name__}"
        part_location = StoreLocation(location.url, location.kind, env)
        self.parts: tuple[PartitionStore, ...] = ()
        opened: list[PartitionStore] = []
        try:
            for index in range(partitions):
                opened.append(PartitionStore(index, part_location))
        except BaseException:
            for part in opened:
                part.close()
            raise
        self.parts = tuple(opened)

    @classmethod
    def open(cls, url: str) -> PartitionedSessionStore:
        base, partitions, notify = split_options(url)
        return cls(parse_store_url(base), partitions or 1, notify=notify)

    @property
    def snapshot_warnings(self) -> list[str]:
        """Every partition's saves whose snapshot could not be written (:class:`SessionStore`)."""
        return [warning for part in self.parts for warning in part.snapshot_warnings]

    # ------------------------------------------------------------ routing

    def partition_for(self, session_id: SessionKey) -> PartitionStore:
        """The partition that holds ``session_id`` (a UUID or its text: :func:`session_uuid`)."""
        return self.parts[partition_of(session_uuid(session_id), self.partitions)]

    # ------------------------------------------------------------ SessionStore's public methods

    def create(
        self,
        session_id: SessionKey | None = None,
        *,
        strict_structure: bool = True,
        invariants: Sequence[str] = (),
    ) -> Session:
        session_id = session_id or uuid4()
        return self.partition_for(session_id).create(
            session_id, strict_structure=strict_structure, invariants=invariants
        )

    def save(self, session: Session) -> int:
        return self.partition_for(session.id).save(session)

    def pending_stored(self, session: Session) -> bool | None:
        return self.partition_for(session.id).pending_stored(session)

    def get(
        self,
        session_id: SessionKey,
        *,
        at: int | None = None,
        use_snapshots: bool = True,
        strict_structure: bool = True,
    ) -> Session:
        return self.partition_for(session_id).get(
            session_id, at=at, use_snapshots=use_snapshots, strict_structure=strict_structure
        )

    def load_events(self, session_id: SessionKey, lo: int = 0, hi: int | None = None) -> list[SessionEvent]:
        return self.partition_for(session_id).load_events(session_id, lo, hi)

    def iter_events(
        self,
        session_id: SessionKey,
        lo: int = 0,
        hi: int | None = None,
        *,
        only: Container[int] | None = None,
    ) -> Iterator[SessionEvent]:
        return self.partition_for(session_id).iter_events(session_id, lo, hi, only=only)

    def fold(self, session_id: SessionKey, *, hi: int | None = None, use_snapshots: bool = True) -> Session:
        return self.partition_for(session_id).fold(session_id, hi=hi, use_snapshots=use_snapshots)

    def read_rows(self, session_id: SessionKey, lo: int = 0, hi: int | None = None) -> list[StoredRow]:
        return self.partition_for(session_id).read_rows(session_id, lo, hi)

    def stream_length(self, session_id: SessionKey) -> int:
        return self.partition_for(session_id).stream_length(session_id)

    def exists(self, session_id: SessionKey) -> bool:
        return self.partition_for(session_id).exists(session_id)

    def session_ids(self) -> list[UUID]:
        """Every session id: partition by partition, each in order of first notification."""
        return [sid for part in self.parts for sid in part.session_ids()]

    def all_session_ids(self) -> list[UUID]:
        """:meth:`SessionStore.all_session_ids` of every partition, partition by partition."""
        return [sid for part in self.parts for sid in part.all_session_ids()]

    def iter_sessions(self) -> Iterator[Session]:
        for session_id in self.session_ids():
            yield self.get(session_id)

    def close(self) -> None:
        for part in self.parts:
            part.close()

    def drop_broken_connections(self) -> None:
        """:meth:`SessionStore.drop_broken_connections` of every partition."""
        for part in self.parts:
            part.drop_broken_connections()

    def __enter__(self) -> PartitionedSessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


AnyStore = SessionStore | PartitionedSessionStore


def open_store(url: str | None = None, *, create: bool = True) -> AnyStore:
    """:meth:`SessionStore.open`, or a :class:`PartitionedSessionStore` for ``?partitions=K``
    with K > 1 (or any K with ``notify=off``); ``create=False`` refuses a SQLite store that does
    not exist (:class:`~compaction.errors.StoreNotFoundError`) instead of creating it."""
    if url is None:
        return SessionStore.open(create=create)
    base, partitions, notify = split_options(url)
    if partitions is None or (partitions == 1 and notify):
        return SessionStore.open(base, create=create)
    return PartitionedSessionStore(parse_store_url(base, create=create), partitions, notify=notify)


def home_store(store: AnyStore, session_id: UUID) -> SessionStore:
    """The application that holds ``session_id``: the store itself, or its partition."""
    if isinstance(store, PartitionedSessionStore):
        return store.partition_for(session_id)
    return store


# ---------------------------------------------------------------- the layout guard


def _check_layout(location: StoreLocation, partitions: int) -> None:
    """Refuse a database whose partition tables were written with another K (sessions would be
    routed to partitions that do not hold them)."""
    found = _existing_partitions(location)
    if found and found != set(range(partitions)):
        listed = ", ".join(f"p{i}" for i in sorted(found))
        raise ConfigurationError(
            f"store {location.display}: the database holds partitions {listed} but the URL asks "
            f"for {partitions}; open it with partitions={max(found) + 1}, or copy its sessions "
            "into a fresh database to change the number of partitions"
        )


def _existing_partitions(location: StoreLocation) -> set[int]:
    import psycopg

    env = location.env
    try:
        with psycopg.connect(
            dbname=env["POSTGRES_DBNAME"],
            host=env["POSTGRES_HOST"],
            port=env["POSTGRES_PORT"],
            user=env["POSTGRES_USER"],
            password=env["POSTGRES_PASSWORD"] or None,
            connect_timeout=10,
        ) as connection:
            rows = connection.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema() "
                "AND table_name LIKE 'sessionstore\\_p%\\_events'"
            ).fetchall()
    except psycopg.Error as e:
        raise StoreError(f"cannot open store {location.display}: {e}") from e
    indexes = (str(row[0])[len("sessionstore_p") : -len("_events")] for row in rows)
    return {int(i) for i in indexes if i.isdigit()}
