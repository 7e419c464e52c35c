"""SessionStore: the durable session log, and the only way to its stored rows.

The store holds an ``eventsourcing`` Application (:class:`SessionApplication`) as a field; it is
not one (sessions are not aggregates, so the application's ``save`` and ``repository`` do not
apply). Everything that reads stored rows goes through the store's methods: sessions and events
(strict, or tolerant with :class:`~compaction.sessions.mapper.UnreadableRow` records), stream
lengths, and the notification log (decoded batches, or a blocking feed over the recorder's
eventsourcing ``subscribe()``; SQLite gets a polling one, :mod:`compaction.sessions.polling`).

``SessionStore.open(url)`` takes ``sqlite:///PATH`` (the default,
``sqlite:///./.compaction/sessions.db``, or ``$COMPACTION_STORE``),
``postgresql://USER[:PASSWORD]@HOST:PORT/DB``, ``nats://HOST:PORT[,HOST:PORT...][?stream=S&replicas=N]``
(NATS JetStream, :mod:`compaction.sessions.nats`) or ``memory://``.

Each session is one stream: ``originator_id`` is the session id and ``originator_version`` is the
event's ``seq``. Payloads are msgspec JSON (see :mod:`compaction.sessions.mapper`). All pending events of a
session are saved in one atomic insert; a concurrent writer that got there first makes the save fail
with :class:`~compaction.errors.ConcurrencyError` and nothing of it is stored. Snapshots of the fold
state are taken every ``snapshot_interval`` events so loading a long session stays cheap.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import threading
import time
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable
from urllib.parse import parse_qsl, unquote, urlparse
from uuid import UUID

import msgspec
from eventsourcing.persistence import (
    ApplicationRecorder,
    IntegrityError,
    ListenNotifySubscription,
    Mapper,
    Notification,
    PersistenceError,
    Recording,
    StoredEvent,
    Subscription,
)
from eventsourcing.popo import POPOApplicationRecorder
from eventsourcing.sqlite import SQLiteAggregateRecorder, SQLiteApplicationRecorder
from eventsourcing.system import Leader, RecordingEvent

from compaction.errors import (
    ConcurrencyError,
    ConfigurationError,
    EventCompactionError,
    SaveError,
    SessionNotFoundError,
    StoreDriverMissingError,
    StoreError,
    StoreNotFoundError,
    StoreUnavailableError,
    UnreadableRowError,
)
from compaction.sessions.collector import collector_paused
from compaction.sessions.events import SessionEvent
from compaction.sessions.ids import SessionKey, session_uuid
from compaction.sessions.leases import Closed, CompactionLeases, Grant, LeaseClaim, LogLeases
from compaction.sessions.mapper import SessionMapper, SnapshotEnvelope, StoredRow
from compaction.sessions.plugins import load_event_types
from compaction.sessions.polling import (
    POLLING_SQLITE_RECORDER_TOPIC,
    PollingRecorder,
    PollingSubscription,
)
from compaction.sessions.session import EventLoader, EventPicker, Session, SessionSnapshot

log = logging.getLogger("compaction.store")

DEFAULT_URL = "sqlite:///./.compaction/sessions.db"
DEFAULT_SNAPSHOT_INTERVAL = 1000
EVENT_WINDOW = 4096
"""Rows one read of :meth:`SessionStore.iter_events` fetches (one statement on SQLite and
PostgreSQL; on JetStream the commits holding about that many events, decoded one at a time)."""
OPEN_ATTEMPTS = 5
_CONCURRENT_DDL = ("tuple concurrently updated", "pg_type_typname_nsp_index")


def _reason(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


@contextlib.contextmanager
def database_errors(where: object) -> Iterator[None]:
    """A database error of a read as a :class:`StoreError` naming what was read."""
    try:
        yield
    except PersistenceError as e:
        raise StoreError(f"{where}: the store's database failed: {_reason(e)}") from e


def default_url() -> str:
    return os.environ.get("COMPACTION_STORE") or DEFAULT_URL


@dataclass(frozen=True)
class StoreLocation:
    """A parsed store URL and the eventsourcing environment it stands for."""

    url: str
    kind: str  # memory | sqlite | postgresql | nats
    env: dict[str, str]

    @property
    def display(self) -> str:
        parsed = urlparse(self.url)
        if parsed.password:
            return self.url.replace(f":{parsed.password}@", ":***@")
        return self.url


def parse_store_url(url: str, *, create: bool = True) -> StoreLocation:
    """The store a URL names, as eventsourcing settings. ``create=False`` (read-only commands)
    refuses a SQLite file that does not exist instead of creating its folders. Errors are
    :class:`ConfigurationError` naming the URL, what was expected and what was found."""
    if url.startswith("nats://"):  # several HOST:PORT, which urlparse cannot read
        from compaction.sessions.nats.url import nats_settings

        return StoreLocation(url, "nats", {"IS_SNAPSHOTTING_ENABLED": "y"} | nats_settings(url))
    try:
        parsed = urlparse(url)
        port = parsed.port
    except ValueError as e:  # a port out of range or not a number, an unclosed [IPv6 address
        raise ConfigurationError(
            f"store URL {_redacted(url)!r} is malformed ({e}); expected sqlite:///PATH, "
            "postgresql://USER@HOST:PORT/DB (PORT 1..65535) or memory://"
        ) from e
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
        path = _sqlite_path(url, create=create)
        env |= {
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": path,
            "SQLITE_LOCK_TIMEOUT": "10",
        }
        return StoreLocation(url, "sqlite", env)
    if parsed.scheme in ("postgresql", "postgres"):
        if not parsed.hostname or not parsed.path.strip("/"):
            raise ConfigurationError(
                f"store URL {_redacted(url)!r} needs a host and a database; expected "
                "postgresql://USER@HOST:PORT/DB"
            )
        if port == 0:
            raise ConfigurationError(f"store URL {_redacted(url)!r}: port 0 is not a port; expected 1..65535")
        env |= {
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": unquote(parsed.path.strip("/")),
            "POSTGRES_HOST": parsed.hostname,
            "POSTGRES_PORT": str(port or 5432),
            "POSTGRES_USER": unquote(parsed.username or "postgres"),
            "POSTGRES_PASSWORD": unquote(parsed.password or ""),
        }
        env |= postgres_settings(url, parsed.query)
        return StoreLocation(url, "postgresql", env)
    raise ConfigurationError(
        f"unsupported store URL {_redacted(url)!r}: expected sqlite:///PATH, "
        "postgresql://USER@HOST:PORT/DB, nats://HOST:PORT or memory://"
    )


def _require_nats(display: str) -> None:
    """Refuse a ``nats://`` store, naming the extra, when the NATS client is not installed."""
    try:
        import nats  # noqa: F401  (the JetStream recorder's client)
    except ImportError as e:
        raise StoreDriverMissingError(
            f"store {display}: a nats:// store needs the NATS client, which is not installed "
            f"({e}); install the nats extra: pip install 'event-compaction[nats]'"
        ) from e


def drop_broken_connections(datastore: object) -> None:
    """Check every idle connection of ``datastore``'s pool (an eventsourcing PostgreSQL datastore;
    anything else is left alone): a broken one is closed and a new one is opened in its place. A
    failure of the check itself is left for the next call to report."""
    check = getattr(getattr(datastore, "pool", None), "check", None)
    if callable(check):
        with contextlib.suppress(Exception):
            check()


def _redacted(url: str) -> str:
    head, at, tail = url.rpartition("@")
    if not at or "://" not in head:
        return url
    scheme, _, userinfo = head.partition("://")
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}://{user}{':***' if colon else ''}@{tail}"


def _sqlite_path(url: str, *, create: bool) -> str:
    """PATH of ``sqlite:///PATH`` (``sqlite:///./x.db`` relative, ``sqlite:////var/x.db``
    absolute), checked: no query, nothing SQLite would read as a URI, no NUL; its folder is
    created when ``create``, and the file must exist when not."""
    raw, question, query = url[len("sqlite://") :].partition("?")
    if question:
        raise ConfigurationError(
            f"store URL {url!r}: SQLite store URLs take no query parameters (found {query!r}); "
            "SQLite would read them as URI options (mode=memory keeps nothing); expected "
            "sqlite:///PATH"
        )
    raw = unquote(raw)
    path = raw[1:] if raw.startswith("/") else ""
    if not path:
        raise ConfigurationError(
            f"store URL {url!r} has no database path; expected sqlite:///PATH, for example {DEFAULT_URL}"
        )
    if path == ":memory:":
        return path
    if "\x00" in path:
        raise ConfigurationError(f"store URL {url!r}: the database path contains a NUL byte")
    if path.lower().startswith("file:"):
        raise ConfigurationError(
            f"store URL {url!r}: the database path {path!r} is an SQLite URI filename (file:...); "
            "expected a plain file path, for example sqlite:///./data.db"
        )
    if not create:
        if not Path(path).is_file():
            found = "is not a file" if Path(path).exists() else "does not exist"
            raise StoreNotFoundError(
                f"store {url!r}: {path} {found}; this command needs an existing store "
                "(import or run something first, or check --store / $COMPACTION_STORE)"
            )
        return path
    folder = Path(path).parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigurationError(
            f"store URL {url!r}: cannot create the folder {str(folder)!r} for the database: {e.strerror or e}"
        ) from e
    return path


# URL query parameter -> eventsourcing setting (POSTGRES_STATEMENT_TIMEOUT is this library's),
# with the type its value must have.
POSTGRES_PARAMETERS: Mapping[str, tuple[str, type]] = MappingProxyType(
    {
        "connect_timeout": ("POSTGRES_CONNECT_TIMEOUT", int),
        "lock_timeout": ("POSTGRES_LOCK_TIMEOUT", int),
        "statement_timeout": ("POSTGRES_STATEMENT_TIMEOUT", float),
        "idle_in_transaction_session_timeout": ("POSTGRES_IDLE_IN_TRANSACTION_SESSION_TIMEOUT", int),
        "pool_size": ("POSTGRES_POOL_SIZE", int),
        "max_overflow": ("POSTGRES_MAX_OVERFLOW", int),
        "max_waiting": ("POSTGRES_MAX_WAITING", int),
        "conn_max_age": ("POSTGRES_CONN_MAX_AGE", float),
        "pre_ping": ("POSTGRES_PRE_PING", bool),
        "schema": ("POSTGRES_SCHEMA", str),
        "enable_db_functions": ("POSTGRES_ENABLE_DB_FUNCTIONS", bool),
    }
)
POSTGRES_DEFAULTS: Mapping[str, str] = MappingProxyType(
    {
        "POSTGRES_POOL_SIZE": "4",
        "POSTGRES_LOCK_TIMEOUT": "10",
        "POSTGRES_CONNECT_TIMEOUT": "5",
        "POSTGRES_STATEMENT_TIMEOUT": "300",
    }
)
_BOOLEANS = ("y", "yes", "t", "true", "on", "1", "n", "no", "f", "false", "off", "0")


def postgres_settings(url: str, query: str) -> dict[str, str]:
    """The tunable eventsourcing PostgreSQL settings: the defaults, then ``POSTGRES_*`` from the
    environment, then the URL's query parameters (``?lock_timeout=5&statement_timeout=60``)."""
    settings = dict(POSTGRES_DEFAULTS)
    for name, kind in POSTGRES_PARAMETERS.values():
        value = os.environ.get(name)
        if value:
            settings[name] = _checked(f"environment variable {name}", value, kind)
    for key, value in parse_qsl(query, keep_blank_values=True):
        known = POSTGRES_PARAMETERS.get(key)
        if known is None:
            raise ConfigurationError(
                f"store URL {_redacted(url)!r}: unknown parameter {key!r}; expected one of "
                f"{', '.join(sorted(POSTGRES_PARAMETERS))}"
            )
        name, kind = known
        settings[name] = _checked(f"store URL {_redacted(url)!r}: {key}", value, kind)
    return settings


def _checked(where: str, value: str, kind: type) -> str:
    text = value.strip()
    ok = bool(text)
    if kind is int:
        ok = text.isdigit()
    elif kind is float:
        try:
            ok = float(text) >= 0
        except ValueError:
            ok = False
    elif kind is bool:
        ok = text.lower() in _BOOLEANS
    if not ok:
        expected = {int: "a whole number >= 0", float: "a number >= 0", bool: "yes or no"}
        raise ConfigurationError(
            f"{where}: expected {expected.get(kind, 'a non-empty value')}, found {value!r}"
        )
    return text


class SessionApplication(Leader[UUID]):
    """The eventsourcing application of a :class:`SessionStore`: a ``Leader``, so the store's saves
    prompt the followers of a ``System`` (``SingleThreadedRunner``, ``MultiThreadedRunner``), and
    its mapper (:class:`SessionMapper`) is the one eventsourcing's followers, ``ProjectionRunner``
    and notification-log readers use to decode session rows.

    The store holds it as a field (sessions are not aggregates: the application's ``save`` and
    ``repository`` do not apply to them). A runner constructs it from its environment
    (``SessionApplication(env=...)``): ``COMPACTION_STORE`` (a store URL) or eventsourcing's own
    settings name the database; :meth:`SessionStore.of` wraps the running instance."""

    name = "SessionStore"

    def __init__(self, env: Mapping[str, str] | None = None, *, name: str | None = None) -> None:
        if name is not None:
            self.name = name
        try:
            super().__init__(env=store_settings(self.name, env or {}))
        except BaseException:
            factory = getattr(self, "factory", None)
            if factory is not None:
                with contextlib.suppress(Exception):
                    factory.close()
            raise

    def construct_env(self, name: str, env: Any = None) -> Any:
        # Application.construct_env re-reads os.environ; the settings are merged already.
        from eventsourcing.utils import Environment

        return Environment(name, dict(env or {}))

    def construct_mapper(self) -> Mapper[UUID]:
        # Through the factory, so COMPRESSOR_TOPIC and CIPHER_TOPIC settings take effect.
        return self.factory.mapper(transcoder=self.construct_transcoder(), mapper_class=SessionMapper)

    def prompt_followers(self, stored: Sequence[StoredEvent] = (), ids: Sequence[int] | None = None) -> None:
        """Tell the followers of a ``System`` that ``stored`` rows were committed (what
        ``Leader.save`` does after a save of aggregates); nothing when nobody follows. Called
        without rows (after ``runner.start()``), it prompts them to catch up with whatever was
        committed while they did not run (another process's saves, a crash before they
        processed)."""
        if not self.followers:
            return
        if not stored:
            prompt: RecordingEvent[UUID] = RecordingEvent(self.name, [], self.previous_max_notification_id)
            for follower in self.followers:
                follower.receive_recording_event(prompt)
            return
        if not ids or len(ids) != len(stored):  # a recorder that does not return the ids
            last = self.recorder.max_notification_id() or 0
            ids = range(last - len(stored) + 1, last + 1)
        recordings: list[Recording[UUID]] = [
            Recording(
                domain_event=self.mapper.to_domain_event(row),
                notification=Notification(
                    id=nid, originator_id=row.originator_id,
                    originator_version=row.originator_version, topic=row.topic, state=row.state,
                ),
            )
            for row, nid in zip(stored, ids, strict=True)
        ]  # fmt: skip
        if self.previous_max_notification_id is None:
            self.previous_max_notification_id = recordings[0].notification.id - 1
        self._notify(recordings)


def system_env(url: str, name: str = "SessionStore") -> dict[str, str]:
    """The settings a ``System`` runner needs for the session store at ``url`` beside other
    applications: the store's own settings under its name (``SESSIONSTORE_PERSISTENCE_MODULE``,
    ``SESSIONSTORE_SQLITE_DBNAME``, ...; its followers read them to reach its notification log),
    and ``MAPPER_TOPIC``, so every application of the system decodes session rows with
    :class:`SessionMapper` (which stores and reads their own aggregate events as eventsourcing's
    mapper does). Merge the other applications' settings into it."""
    from compaction.sessions.mapper import SESSION_MAPPER_TOPIC

    return store_settings(name, {f"{name.upper()}_COMPACTION_STORE": url}) | {
        "MAPPER_TOPIC": SESSION_MAPPER_TOPIC
    }


def store_settings(name: str, env: Mapping[str, str]) -> dict[str, str]:
    """The eventsourcing settings of a session store named ``name`` from ``env`` (a ``System``
    runner's, shared by every application it constructs): a store URL in ``NAME_COMPACTION_STORE``
    or ``COMPACTION_STORE`` expanded into settings of this application alone (``NAME_...``, so the
    other applications keep theirs; what ``env`` names for it itself wins), and the store's own
    recorders (polling SQLite, batched PostgreSQL) where none is named."""
    from eventsourcing.utils import Environment

    merged = dict(env)
    prefix = f"{name.upper()}_"
    url = merged.pop(f"{prefix}COMPACTION_STORE", None) or merged.pop("COMPACTION_STORE", None)
    if url:
        for key, value in parse_store_url(url).env.items():
            merged.setdefault(prefix + key, value)
        merged.setdefault(prefix + "COMPACTION_STORE_URL", url)
    read = Environment(name, merged)
    if not read.get("IS_SNAPSHOTTING_ENABLED"):
        merged[prefix + "IS_SNAPSHOTTING_ENABLED"] = "y"
    module = read.get("PERSISTENCE_MODULE")
    recorder = {
        "eventsourcing.sqlite": POLLING_SQLITE_RECORDER_TOPIC,
        "eventsourcing.postgres": POSTGRES_RECORDER_TOPIC,
    }.get(module or "")
    if recorder and not read.get("APPLICATION_RECORDER_TOPIC"):
        merged[prefix + "APPLICATION_RECORDER_TOPIC"] = recorder
    if module == "eventsourcing.postgres":
        for key, value in POSTGRES_DEFAULTS.items():
            if not read.get(key):
                merged[prefix + key] = value
    return merged


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

    def __init__(
        self,
        env: dict[str, str] | None = None,
        *,
        location: StoreLocation | None = None,
        application: SessionApplication | None = None,
        strict_types: bool | None = None,
    ):
        load_event_types()  # every process that opens a store knows the installed event types
        if application is not None:
            self.location = location or _location_of(application)
            self.settings: Mapping[str, str] = MappingProxyType(_own_settings(application))
            self.application = application
        else:
            self.location = location or StoreLocation("memory://", "memory", dict(env or {}))
            # Settings from the URL win over the process environment.
            merged = {k: v for k, v in os.environ.items() if not k.startswith(_ES_KEYS)}
            merged.update(self.location.env)
            merged.update(env or {})
            merged.setdefault("PERSISTENCE_MODULE", "eventsourcing.popo")
            merged.pop("COMPACTION_STORE", None)  # the URL is parsed: self.location
            merged = store_settings(self.name, merged)
            if merged.get("PERSISTENCE_MODULE") == "eventsourcing.postgres":
                _probe_postgres(self.location.display, merged)
            elif self.location.kind == "nats":
                _require_nats(self.location.display)
            self.settings = MappingProxyType(merged)
            self.application = self._open(merged)
        mapper = self.application.mapper
        assert isinstance(mapper, SessionMapper)
        if strict_types is None:
            strict_types = os.environ.get("COMPACTION_STRICT_TYPES", "").lower() in _YES
        mapper.strict_types = strict_types
        self._mapper = mapper
        self._recorder = self.application.recorder
        self.snapshot_fallbacks: list[str] = []  # loads that replayed past an unusable snapshot
        self.snapshot_warnings: list[str] = []  # saves whose snapshot could not be written
        self._covered: dict[UUID, int] = {}  # snapshot lengths whose covered rows were counted
        timeout = self.settings.get("POSTGRES_STATEMENT_TIMEOUT")
        if timeout and hasattr(self._recorder, "statement_timeout"):
            self._recorder.statement_timeout = float(timeout)
        self._ids: dict[object, UUID] = {}

    def _open(self, settings: dict[str, str]) -> SessionApplication:
        try:
            return _open_application(self.name, settings)
        except PersistenceError as e:
            raise StoreError(f"cannot open store {self.location.display}: {e}") from e
        except Exception as e:
            if type(e).__module__.startswith(("psycopg", "sqlite3")):
                raise StoreError(f"cannot open store {self.location.display}: {e}") from e
            raise

    @classmethod
    def open(
        cls,
        url: str | None = None,
        *,
        snapshot_interval: int | None = None,
        create: bool = True,
        strict_types: bool | None = None,
    ) -> SessionStore:
        """The store at ``url``; ``create=False`` (read-only commands) refuses a SQLite store that
        does not exist (:class:`StoreNotFoundError`) instead of creating it. A row of an event
        type no installed package defines reads as an ``UnknownEvent``; ``strict_types=True`` (or
        ``$COMPACTION_STRICT_TYPES=1``) refuses it (:class:`UnknownEventTypeError`) instead."""
        store = cls(
            location=parse_store_url(url or default_url(), create=create),
            strict_types=strict_types,
        )
        if snapshot_interval is not None:
            store.snapshot_interval = snapshot_interval
        return store

    @classmethod
    def of(cls, application: SessionApplication, *, strict_types: bool | None = None) -> SessionStore:
        """The store over an application a ``System`` runner constructed
        (``SessionStore.of(runner.get(SessionApplication))``): its saves prompt the runner's
        followers. Closing the store closes the application."""
        return cls(application=application, strict_types=strict_types)

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
        return str(getattr(recorder, "backend_name", type(recorder).__qualname__))

    def close(self) -> None:
        self.application.close()

    def drop_broken_connections(self) -> None:
        """After a lost connection (a terminated backend, a restart, a failover): test the pooled
        PostgreSQL connections and replace the broken ones, so the next call reaches a healthy
        server at once instead of being handed the dead connections one failure at a time (the
        pool does not ping a connection it hands out). Nothing for the other backends."""
        drop_broken_connections(getattr(self._recorder, "datastore", None))

    # ------------------------------------------------------------ compaction leases

    @property
    def compaction_leases(self) -> CompactionLeases:
        """Where the store keeps compaction leases besides the log (:mod:`compaction.sessions.leases`):
        JetStream's ``<stream>_leases`` bucket, or none (SQLite, PostgreSQL and memory stores, where
        the log's ``compact/start`` alone arbitrates)."""
        make = getattr(self.application.factory, "compaction_leases", None)
        leases: CompactionLeases = make() if callable(make) else _LOG_LEASES
        return leases

    def acquire_lease(self, claim: LeaseClaim, *, replaces: str | None, closed: Closed) -> Grant | None:
        """:meth:`CompactionLeases.acquire`, a database failure raised as :class:`StoreError`."""
        with database_errors(f"session {claim.session_id}: claiming its compaction lease"):
            return self.compaction_leases.acquire(claim, replaces=replaces, closed=closed)

    def confirm_lease(self, grant: Grant, start_seq: int) -> Grant:
        return self.compaction_leases.confirm(grant, start_seq)

    def release_lease(self, grant: Grant) -> None:
        self.compaction_leases.release(grant)

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ writing

    def create(
        self,
        session_id: SessionKey | None = None,
        *,
        strict_structure: bool = True,
        invariants: Sequence[str] = (),
    ) -> Session:
        """A new session (nothing is stored until the first :meth:`save`). With ``invariants``
        (``compaction.sessions.invariants.DEFAULT_INVARIANTS``: the ``compact/*`` bracket rules)
        its first event is the ``session/invariants`` marker that puts them in force for every
        later event, at append and on load."""
        session = Session(session_id, strict_structure=strict_structure)
        if invariants:
            session.enforce(invariants)
        return session

    def save(self, session: Session) -> int:
        """Store every pending event of ``session`` in one atomic insert; return how many.

        A failure of the insert raises :class:`SaveError` (``stored`` says whether the events are
        in the store) or :class:`ConcurrencyError`. Once the events are stored the save succeeds:
        a snapshot that cannot be written then (disk full, any database error on the snapshot
        table) is skipped with a warning, logged and kept in :attr:`snapshot_warnings`; the next
        snapshot is taken at the next interval."""
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
            self._snapshot_or_warn(session)
        return len(pending)

    def _snapshot_or_warn(self, session: Session) -> None:
        try:
            self.take_session_snapshot(session)
        except (PersistenceError, OSError, StoreUnavailableError) as e:
            message = (
                f"session {session.id}: its {len(session)} events are stored, but the snapshot at "
                f"length {len(session)} could not be written ({_reason(e)}); loading "
                "replays past it until the next snapshot"
            )
            self.snapshot_warnings.append(message)
            log.warning("%s", message)

    def append_events(self, session_id: SessionKey, events: Sequence[SessionEvent]) -> None:
        """Store ``events`` (consecutive seqs) in one atomic insert, without the session's append
        rules (store-to-store copies); :class:`ConcurrencyError` when a seq is already taken,
        :class:`SaveError` (saying whether the events are stored) for any other database error."""
        session_id = session_uuid(session_id)
        if not events:
            return
        stored = [self._mapper.stored_event(session_id, e) for e in events]
        try:
            ids = self._recorder.insert_events(stored)  # one transaction: all of them or none
        except IntegrityError as e:
            if self._seqs_taken(session_id, events[0].seq, events[-1].seq):
                raise ConcurrencyError(session_id, events[0].seq, events[-1].seq) from e
            raise SaveError(session_id, events[0].seq, events[-1].seq, False, _reason(e)) from e
        except PersistenceError as e:
            outcome = self._stored_after_failure(session_id, stored)
            reason = _reason(e)
            if outcome is not True:
                raise SaveError(session_id, events[0].seq, events[-1].seq, outcome, reason) from e
            log.warning(
                "session %s: the insert of seqs %d..%d reported %s, but every one of them is "
                "stored; the save succeeded",
                session_id, events[0].seq, events[-1].seq, reason,
            )  # fmt: skip
            ids = None
        self.application.prompt_followers(stored, ids)

    def take_session_snapshot(self, session: Session) -> None:
        snapshots = self.application.snapshots
        if snapshots is None:
            return
        snapshot = session.snapshot()
        try:
            snapshots.put([SnapshotEnvelope(session.id, snapshot.length, snapshot)])
        except IntegrityError:
            # Another handle already snapshotted this exact version; anything else refused it.
            taken = snapshots.recorder.select_events(
                session.id, gt=snapshot.length - 1, lte=snapshot.length, limit=1
            )
            if not taken:
                raise

    def pending_stored(self, session: Session) -> bool | None:
        """Are ``session``'s pending events stored, exactly, at their seqs (a save whose answer was
        lost)? None when the store cannot be asked."""
        pending = session.pending
        if not pending:
            return True
        stored = [self._mapper.stored_event(session.id, e) for e in pending]
        return self._stored_after_failure(session.id, stored)

    def _seqs_taken(self, session_id: UUID, first: int, last: int) -> bool:
        """Is any of seqs ``first..last`` stored (by another writer)? True when the store cannot
        tell: a refused insert is then reported as the conflict it most likely was."""
        try:
            found = self._recorder.select_events(session_id, gt=first - 1, lte=last, limit=1)
        except (PersistenceError, OSError, StoreUnavailableError):
            return True
        return bool(found)

    def _stored_after_failure(self, session_id: UUID, stored: Sequence[Any]) -> bool | None:
        """After a failed insert: are exactly these rows stored (True), not stored (False), or
        can the store not tell (None)? A lost connection can fail a commit that went through."""
        first, last = stored[0].originator_version, stored[-1].originator_version
        try:
            rows = self._rows(session_id, first, last + 1)
        except (PersistenceError, OSError, StoreUnavailableError):
            return None
        if len(rows) != len(stored):
            return False
        return all(
            row[0] == event.originator_version and bytes(row[2]) == event.state
            for row, event in zip(rows, stored, strict=True)
        )

    # ------------------------------------------------------------ reading

    def load_events(
        self, session_id: SessionKey, lo: int = 0, hi: int | None = None, only: Container[int] | None = None
    ) -> list[SessionEvent]:
        """Stored events with ``lo <= seq < hi`` (and a seq in ``only``, when given: the other rows
        are not decoded), in order; a row that does not decode raises."""
        session_id = session_uuid(session_id)
        decode = self._mapper.decode_row
        with database_errors(f"session {session_id}: reading seqs from {lo}"):
            rows = self._rows(session_id, lo, hi)
        return [
            decode(session_id, version, topic, state)
            for version, topic, state in rows
            if only is None or version in only
        ]

    def iter_events(
        self,
        session_id: SessionKey,
        lo: int = 0,
        hi: int | None = None,
        *,
        only: Container[int] | None = None,
        window: int = EVENT_WINDOW,
    ) -> Iterator[SessionEvent]:
        """The events :meth:`load_events` returns, in order, read ``window`` rows at a time: memory
        holds one window whatever the session's length (and a row is decoded only as it is
        yielded). Each window is read after the last seq the one before it held, so every event is
        yielded once; without ``hi`` the read ends at the end the session has when its last window
        is read (JetStream: when the read begins), so a session that grows meanwhile is read as a
        contiguous prefix. A row that does not decode raises, as it is reached."""
        session_id = session_uuid(session_id)
        decode = self._mapper.decode_row
        for rows in self._row_windows(session_id, lo, hi, max(1, window)):
            for version, topic, state in rows:
                if only is None or version in only:
                    yield decode(session_id, version, topic, state)

    def _row_windows(
        self, session_id: UUID, lo: int, hi: int | None, window: int
    ) -> Iterator[Sequence[_Row]]:
        gt = lo - 1 if lo > 0 else None
        lte = None if hi is None else hi - 1
        if lte is not None and lte < lo:
            return
        recorder = self._recorder
        where = f"session {session_id}: reading seqs from {lo} in windows"
        if isinstance(recorder, WindowedLog):  # nats://: commit by commit
            windows = recorder.row_windows(session_id, gt, lte, window)
            while True:
                with database_errors(where):
                    found = next(windows, None)
                if found is None:
                    return
                yield found
        while True:
            with database_errors(where):
                rows = self._window(session_id, gt, lte, window)
            if rows:
                yield rows
            if len(rows) < window:
                return
            gt = rows[-1][0]

    def _window(self, session_id: UUID, gt: int | None, lte: int | None, limit: int) -> Sequence[_Row]:
        """Up to ``limit`` rows with ``gt < seq <= lte``, in seq order: one statement."""
        recorder = self._recorder
        if isinstance(recorder, SQLiteAggregateRecorder):
            return _sqlite_rows(recorder, session_id, gt, lte, limit)
        stored = recorder.select_events(session_id, gt=gt, lte=lte, limit=limit)
        return [(s.originator_version, s.topic, s.state) for s in stored]

    def read_rows(self, session_id: SessionKey, lo: int = 0, hi: int | None = None) -> list[StoredRow]:
        """Stored rows with ``lo <= seq < hi`` in seq order, read tolerantly: each is its event,
        or an :class:`UnreadableRow` naming the seq, the type and why it does not decode (a
        damaged log stays readable; missing seqs are simply absent)."""
        session_id = session_uuid(session_id)
        read = self._mapper.read_row
        with database_errors(f"session {session_id}: reading seqs from {lo}"):
            rows = self._rows(session_id, lo, hi)
        return [read(session_id, version, topic, state) for version, topic, state in rows]

    def stream_length(self, session_id: SessionKey) -> int:
        """1 + the highest stored seq of the session (0 when it has no stored row)."""
        session_id = session_uuid(session_id)
        with database_errors(f"session {session_id}: reading its length"):
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
        with database_errors("the notification log: reading its last id"):
            return self._recorder.max_notification_id() or 0

    def count_notifications(self, after: int, upto: int) -> int:
        """How many events have a notification id in ``(after, upto]``: the difference of the
        ids where they are numbered one after the other (SQLite, PostgreSQL, memory), counted
        from the commit headers on JetStream (whose ids follow the stream sequence, with gaps)."""
        recorder = self._recorder
        if isinstance(recorder, SparseLog):  # nats://
            with database_errors(f"the notification log: counting ids {after}..{upto}"):
                return recorder.count_notifications(after, upto)
        return max(0, upto - after)

    def notifications(
        self,
        after: int,
        limit: int,
        *,
        topics: Sequence[str] = (),
        upto: int | None = None,
        on_unreadable: Callable[[UnreadableRowError], None] | None = None,
    ) -> list[StoredNotification]:
        """Up to ``limit`` decoded notifications with ``after < id (<= upto)``, in order, only of
        ``topics`` when given; a row that does not decode raises :class:`UnreadableRowError`, or,
        with ``on_unreadable``, is handed to it and left out (one damaged session does not stop
        a reader of the whole log)."""
        with database_errors(f"the notification log: reading after notification {after}"):
            rows = self._notification_rows(after, limit, topics, upto)
        if on_unreadable is None:
            return self._decode_batch(rows)
        decoded: list[StoredNotification] = []
        for row in rows:
            try:
                decoded.append(self._notification(*row))
            except UnreadableRowError as e:
                on_unreadable(e)
        return decoded

    def _notification_rows(
        self, after: int, limit: int, topics: Sequence[str], upto: int | None
    ) -> list[_Notified]:
        if not topics and upto is None:
            return _notification_rows(self._recorder, after, limit)
        found = self._recorder.select_notifications(
            start=after, limit=limit, stop=upto, topics=topics, inclusive_of_start=False
        )
        return [(n.id, n.originator_id, n.originator_version, n.topic, n.state) for n in found]

    def follow(
        self, after: int = 0, *, poll_interval: float | None = None, durable: str | None = None
    ) -> NotificationFeed:
        """Decoded notifications after ``after``, blocking for new ones until stopped. With
        ``durable`` (a follower's name: the projection runner's) on a store whose log has durable
        consumers (JetStream), that consumer, which the follower acknowledges
        (:meth:`NotificationFeed.processed`). Else, with a ``poll_interval`` (projection runners),
        a polling subscription on every backend; without one, the recorder's eventsourcing
        subscription (``LISTEN`` on PostgreSQL, the in-memory recorder's listeners, polling for
        SQLite and unannounced partitions)."""
        recorder = self._recorder
        if durable is not None and isinstance(recorder, DurableLog):
            with database_errors(f"the notification log: the durable consumer of {durable!r}"):
                return NotificationFeed(recorder.follow_durably(durable, after), self._notification)
        if poll_interval is not None and isinstance(recorder, PollingRecorder):
            subscription: Subscription[Any] = PollingSubscription(
                recorder, after, poll_interval=poll_interval
            )
        else:
            subscription = recorder.subscribe(gt=after)
            if poll_interval is not None and isinstance(subscription, ListenNotifySubscription):
                _recheck_every(subscription, poll_interval)
        return NotificationFeed(subscription, self._notification)

    def _decode_batch(self, rows: Sequence[_Notified]) -> list[StoredNotification]:
        """Decode a batch (a rebuild decodes every row of the log) with the garbage collector
        paused until the end: the decoded events all stay alive until the batch is folded, and
        collections over the growing batch doubled the decoding time of a 100k-row rebuild."""
        with collector_paused():
            return [self._notification(*row) for row in rows]

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
        session_id: SessionKey,
        *,
        at: int | None = None,
        use_snapshots: bool = True,
        strict_structure: bool = True,
    ) -> Session:
        """Load a session, optionally as it was right after event ``at``."""
        session_id = session_uuid(session_id)
        if at is not None and at < 0:
            raise StoreError(f"session {session_id}: cannot load it at seq {at}; seqs start at 0")
        with database_errors(f"session {session_id}: loading it"):
            session = self._load(session_id, at, use_snapshots, strict_structure)
        if at is not None and len(session) <= at:
            raise StoreError(
                f"session {session_id} has {len(session)} events (seqs 0..{len(session) - 1}); "
                f"cannot load it at seq {at}"
            )
        return session

    def _load(self, session_id: UUID, at: int | None, use_snapshots: bool, strict_structure: bool) -> Session:
        snapshot = self._latest_snapshot(session_id, at) if use_snapshots else None
        if snapshot is not None:
            session = self._from_snapshot(session_id, snapshot, at, strict_structure)
            if session is not None:
                return session
        events = self.load_events(session_id, 0, None if at is None else at + 1)
        if not events:
            raise SessionNotFoundError(session_id)
        return Session.replay(session_id, events, strict_structure=strict_structure)

    def _from_snapshot(
        self,
        session_id: UUID,
        snapshot: SessionSnapshot,
        at: int | None,
        strict_structure: bool,
        *,
        tail: bool = True,
    ) -> Session | None:
        """The session from its snapshot and (``tail``) the events after it; None (replay instead)
        when the snapshot does not restore. The rows the snapshot covers are counted (once per store
        handle and snapshot: an index count, about 8 ms per 100,000 rows on SQLite): a deleted or
        moved row below it fails the load as a replay would."""
        if self._covered.get(session_id) != snapshot.length:
            covered = self._row_count(session_id, snapshot.length)
            if covered != snapshot.length:
                raise StoreError(
                    f"session {session_id}: its snapshot covers seqs 0..{snapshot.length - 1} but "
                    f"{covered} of those {snapshot.length} rows are stored (rows deleted or "
                    f"moved); run `compaction audit {session_id}`"
                )
            if len(self._covered) > _MAX_CACHED_IDS:
                self._covered.clear()
            self._covered[session_id] = snapshot.length

        loader, picker = self._fetchers(session_id)
        try:
            session = Session.from_snapshot(
                session_id, snapshot, loader, strict_structure=strict_structure, picker=picker
            )
        except StoreUnavailableError:
            raise  # the store did not answer: the snapshot is fine, and a replay would wait too
        except (EventCompactionError, ValueError, KeyError, TypeError) as e:
            self._fell_back(session_id, snapshot.length, f"it does not restore ({e})")
            return None
        if tail:
            for event in self.load_events(session_id, snapshot.length, None if at is None else at + 1):
                session.append(event)
            session.mark_saved()
        return session

    def _fetchers(self, session_id: UUID) -> tuple[EventLoader, EventPicker]:
        """How a session restored from its snapshot (or released) fetches its older events."""

        def loader(lo: int, hi: int) -> Sequence[SessionEvent]:
            return self.load_events(session_id, lo, hi)

        def picker(lo: int, hi: int, only: Container[int]) -> Sequence[SessionEvent]:
            return self.load_events(session_id, lo, hi, only)

        return loader, picker

    def fold(
        self,
        session_id: SessionKey,
        *,
        hi: int | None = None,
        use_snapshots: bool = True,
        strict_structure: bool = True,
        window: int = EVENT_WINDOW,
    ) -> Session:
        """The session as :meth:`get` loads it (its first ``hi`` events when given), folded from
        its latest snapshot, or from seq 0, through :meth:`iter_events`: each window of events is
        appended, every rule re-checked, then released (:meth:`Session.release`), so memory holds
        one window and the fold state (the surface's seqs, the turn structure), not the log.
        Events are fetched from the store again when asked for: for reads of any length that
        need the session's state (export, copy); :meth:`get` keeps what it loaded."""
        session_id = session_uuid(session_id)
        if hi is not None and hi < 1:
            raise StoreError(f"session {session_id}: cannot fold its first {hi} events")
        with database_errors(f"session {session_id}: folding it"):
            at = None if hi is None else hi - 1
            snapshot = self._latest_snapshot(session_id, at) if use_snapshots else None
            session = (
                self._from_snapshot(session_id, snapshot, at, strict_structure, tail=False)
                if snapshot is not None
                else None
            )
        if session is None:
            session = Session(session_id, strict_structure=strict_structure)
        loader, picker = self._fetchers(session_id)
        events = self.iter_events(session_id, len(session), hi, window=window)
        for appended, event in enumerate(events, start=1):
            session.append(event)
            if appended % window == 0:
                session.mark_saved()
                session.release(loader, picker)
        session.mark_saved()
        session.release(loader, picker)
        if not len(session):
            raise SessionNotFoundError(session_id)
        if hi is not None and len(session) < hi:
            raise StoreError(
                f"session {session_id} has {len(session)} events (seqs 0..{len(session) - 1}); "
                f"cannot fold its first {hi}"
            )
        return session

    def _fell_back(self, session_id: UUID, length: int, why: str) -> None:
        message = (
            f"session {session_id}: the snapshot at length {length} is unusable: {why}; "
            "replaying the events instead"
        )
        self.snapshot_fallbacks.append(message)
        log.warning("%s", message)

    def _row_count(self, session_id: UUID, below: int) -> int:
        """How many rows of the session are stored with ``seq < below`` (one index count)."""
        recorder: Any = self._recorder
        if isinstance(recorder, OriginatorIndex):  # nats://
            return recorder.count_below(session_id, below)
        table = getattr(recorder, "events_table_name", None)
        if table is None:  # memory://
            return len(recorder.select_events(session_id, lte=below - 1))
        if isinstance(recorder, SQLiteAggregateRecorder):
            statement = f"SELECT COUNT(*) FROM {table} WHERE originator_id=? AND originator_version<?"
            with recorder.datastore.transaction(commit=False) as cursor:
                cursor.sqlite_cursor.row_factory = None
                cursor.execute(statement, (session_id.hex, below))
                return int(cursor.fetchone()[0])
        from psycopg.rows import tuple_row
        from psycopg.sql import SQL, Identifier

        query = SQL(
            "SELECT COUNT(*) FROM {0}.{1} WHERE originator_id = %s AND originator_version < %s"
        ).format(Identifier(recorder.datastore.schema), Identifier(table))
        with (
            recorder.datastore.get_connection() as conn,
            conn.cursor(row_factory=tuple_row) as cursor,
        ):
            cursor.execute(query, (session_id, below), prepare=True)
            row = cursor.fetchone()
        return int(row[0]) if row else 0

    def _latest_snapshot(self, session_id: UUID, at: int | None) -> SessionSnapshot | None:
        snapshots = self.application.snapshots
        if snapshots is None:
            return None
        stored = snapshots.recorder.select_events(
            session_id, lte=None if at is None else at + 1, desc=True, limit=1
        )
        if not stored:
            return None
        try:
            snapshot = self._mapper.decode_snapshot(stored[0])
        except EventCompactionError as e:
            self._fell_back(session_id, stored[0].originator_version, str(e))
            return None
        if snapshot is not None and snapshot.length != stored[0].originator_version:
            self._fell_back(
                session_id,
                stored[0].originator_version,
                f"it says length {snapshot.length} (tampered or corrupt row)",
            )
            return None
        return snapshot

    def exists(self, session_id: SessionKey) -> bool:
        """Does the store hold any event of the session? Never False for one it holds: a store
        that cannot tell (a JetStream cluster electing a leader) raises
        :class:`StoreUnavailableError` after its bounded retries."""
        session_id = session_uuid(session_id)
        recorder = self._recorder
        with database_errors(f"session {session_id}: looking it up"):
            if isinstance(recorder, OriginatorIndex):  # nats://
                return recorder.has_events(session_id)
            return bool(recorder.select_events(session_id, limit=1))

    def session_ids(self) -> list[UUID]:
        """Every session id in the store, in order of first notification."""
        return list(_distinct_ids(self._recorder, self.backend))

    def all_session_ids(self) -> list[UUID]:
        """Every session that has any stored row, in order of its first stored row: unlike
        :meth:`session_ids` (one indexed lookup of the seq-0 rows) this also finds a damaged
        session whose first row is missing. A full pass over the key index: for listings."""
        return list(_all_ids(self._recorder, self.backend))

    def iter_sessions(self) -> Iterator[Session]:
        for session_id in self.session_ids():
            yield self.get(session_id)


_YES = ("1", "y", "yes", "true", "on")


def _own_settings(application: SessionApplication) -> dict[str, str]:
    """The application's settings as it reads them: its own ``NAME_KEY`` ones as ``KEY``."""
    prefix = f"{application.name.upper()}_"
    raw = dict(application.env)
    own = {key[len(prefix) :]: value for key, value in raw.items() if key.startswith(prefix)}
    return {key: value for key, value in raw.items() if not key.startswith(prefix)} | own


def _location_of(application: SessionApplication) -> StoreLocation:
    """Where an application's rows are, for messages (no password shown)."""
    env = application.env
    url = env.get("COMPACTION_STORE_URL")
    module = env.get("PERSISTENCE_MODULE") or "eventsourcing.popo"
    kind = {"eventsourcing.sqlite": "sqlite", "eventsourcing.postgres": "postgresql"}.get(
        module, "memory" if module == "eventsourcing.popo" else module
    )
    if not url:
        where = env.get("SQLITE_DBNAME") or env.get("POSTGRES_DBNAME") or ""
        url = f"{kind}:///{where}" if kind == "sqlite" else f"{kind}://{where}"
    return StoreLocation(url, kind, {})


_LOG_LEASES = LogLeases()
_ES_KEYS = ("PERSISTENCE_MODULE", "SQLITE_", "POSTGRES_", "NATS_", "IS_SNAPSHOTTING", "SESSIONSTORE_")


@runtime_checkable
class OriginatorIndex(Protocol):
    """A recorder that lists its originators and counts their rows itself (no SQL table to
    query): the JetStream recorder."""

    def originator_ids(self, *, first_stored: bool) -> list[UUID]: ...

    def count_below(self, originator_id: UUID, below: int) -> int: ...

    def has_events(self, originator_id: UUID) -> bool: ...


@runtime_checkable
class SparseLog(Protocol):
    """A recorder whose notification ids have gaps, which counts the events between two ids
    itself (JetStream: ids follow the stream sequence)."""

    def count_notifications(self, after: int, upto: int) -> int: ...


@runtime_checkable
class WindowedLog(Protocol):
    """A recorder that reads a session's rows in windows itself (JetStream: the commits holding
    about ``window`` events fetched together, then decoded one commit at a time)."""

    def row_windows(
        self, originator_id: UUID, gt: int | None, lte: int | None, window: int
    ) -> Iterator[list[_Row]]: ...


@runtime_checkable
class DurableLog(Protocol):
    """A recorder whose followers read through durable consumers on the server (JetStream)."""

    def follow_durably(self, name: str, gt: int | None = None) -> Subscription[Any]: ...


def _distinct_ids(recorder: Any, kind: str) -> Iterator[UUID]:
    """Session ids in order of their first event: one indexed query per backend (the first event of
    every session is the row with ``originator_version = 0``)."""
    if isinstance(recorder, OriginatorIndex):  # nats://
        yield from recorder.originator_ids(first_stored=True)
        return
    table = _events_table(recorder)
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


def _all_ids(recorder: Any, kind: str) -> Iterator[UUID]:
    if isinstance(recorder, OriginatorIndex):  # nats://
        yield from recorder.originator_ids(first_stored=False)
        return
    table = _events_table(recorder)
    if table is None:  # memory://
        seen: dict[UUID, None] = {}
        for stored in recorder._stored_events:
            seen.setdefault(_uuid(stored.originator_id), None)
        yield from seen
        return
    first = "MIN(notification_id)" if kind == "postgresql" else "MIN(rowid)"
    statement = f"SELECT originator_id FROM {table} GROUP BY originator_id ORDER BY {first}"
    with recorder.datastore.transaction(commit=False) as cursor:
        cursor.execute(statement)
        rows = cursor.fetchall()
    for row in rows:
        yield _uuid(row["originator_id"])


def _events_table(recorder: Any) -> str | None:
    """The events table of a SQL recorder as a statement names it (PostgreSQL: qualified by its
    quoted schema, ``?schema=``); None for the in-memory recorder."""
    table = getattr(recorder, "events_table_name", None)
    schema = getattr(getattr(recorder, "datastore", None), "schema", None)
    if table is None or not isinstance(schema, str):
        return table
    return f"{quoted_identifier(schema)}.{quoted_identifier(table)}"


def quoted_identifier(name: str) -> str:
    """``name`` as a PostgreSQL quoted identifier: in double quotes, each double quote doubled, so
    any name (``x"; DROP TABLE t; --``) is only ever a name."""
    if "\x00" in name:
        raise ConfigurationError(f"a PostgreSQL identifier cannot hold a NUL byte; found {name!r}")
    return '"' + name.replace('"', '""') + '"'


def _uuid(value: object) -> UUID:
    return value if isinstance(value, UUID) else UUID(str(value))


_Row = tuple[int, str, bytes]  # originator_version, topic, state


def _sqlite_rows(
    recorder: SQLiteAggregateRecorder,
    session_id: UUID,
    gt: int | None,
    lte: int | None,
    limit: int | None = None,
) -> list[_Row]:
    """Plain tuples straight from sqlite3: the stock ``select_events`` builds a ``sqlite3.Row``,
    a ``StoredEvent`` and a ``UUID`` per row, which costs more than decoding the payload."""
    statement = (
        f"SELECT originator_version, topic, state FROM {recorder.events_table_name} WHERE originator_id=? "
    )
    params: list[object] = [session_id.hex]
    if gt is not None:
        statement += "AND originator_version>? "
        params.append(gt)
    if lte is not None:
        statement += "AND originator_version<=? "
        params.append(lte)
    statement += "ORDER BY originator_version ASC"
    if limit is not None:
        statement += " LIMIT ?"
        params.append(limit)
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


def _sqlite_notifications(recorder: SQLiteApplicationRecorder, after: int, limit: int) -> list[_Notified]:
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


def _recheck_every(subscription: ListenNotifySubscription[Any], interval: float) -> None:
    """Wake a LISTEN/NOTIFY subscription every ``interval`` seconds as if notified, until it stops.

    eventsourcing's subscription selects what is stored, then starts listening on another thread: a
    NOTIFY sent in between is lost, and the subscription then waits for the next one (seen under
    load: a follower stuck 6 notifications behind on a partitioned PostgreSQL store). The re-check
    bounds that wait by the reader's poll interval; notifications still wake it at once."""
    notified = subscription._has_been_notified  # eventsourcing 9.5's wake-up event

    def tick() -> None:
        while not subscription._has_been_stopped:
            time.sleep(interval)
            notified.set()

    threading.Thread(target=tick, name="compaction-recheck", daemon=True).start()


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
        try:
            n = next(self.subscription)
        except PersistenceError as e:  # the subscription's connection failed
            raise StoreError(f"following the notification log failed: {_reason(e)}") from e
        return self._decode(n.id, n.originator_id, n.originator_version, n.topic, n.state)

    def processed(self, notification_id: int) -> None:
        """Every notification up to ``notification_id`` is applied and tracked: a durable consumer
        acknowledges it (nothing to do for other subscriptions)."""
        acknowledge = getattr(self.subscription, "acknowledge", None)
        if acknowledge is not None:
            try:
                acknowledge(notification_id)
            except PersistenceError as e:
                raise StoreError(f"acknowledging notification {notification_id} failed: {_reason(e)}") from e

    def stop(self) -> None:
        self.subscription.stop()

    def __enter__(self) -> NotificationFeed:
        self.subscription.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.subscription.__exit__(*exc)


POSTGRES_RECORDER_TOPIC = "compaction.sessions.pgrecorder:SessionPostgresRecorder"


def _probe_postgres(display: str, env: Mapping[str, str]) -> None:
    """One direct connection before the pool opens, so a wrong host, port, database, user or
    password fails at once with the driver's reason (the pool would retry for
    ``connect_timeout`` seconds, then say only "couldn't get a connection")."""
    import psycopg

    try:
        timeout = max(1, int(env.get("POSTGRES_CONNECT_TIMEOUT") or 5))
        connection = psycopg.connect(
            dbname=env["POSTGRES_DBNAME"],
            host=env["POSTGRES_HOST"],
            port=env["POSTGRES_PORT"],
            user=env["POSTGRES_USER"],
            password=env.get("POSTGRES_PASSWORD") or None,
            connect_timeout=timeout,
        )
    except psycopg.Error as e:
        reason = " ".join(str(e).split())
        if _database_exists(env) is False:
            reason += f"; {_how_to_create(env)}"
        raise StoreError(f"cannot open store {display}: {reason}") from e
    connection.close()


def create_postgres_database(url: str) -> bool:
    """Create the database a ``postgresql://`` store URL names when its server does not have it
    (the target of ``compaction copy``, a new store as a new SQLite path is); True when this call
    created it. Any other URL, a reachable database, or a server this cannot ask: False (opening
    the store then reports what is wrong)."""
    location = parse_store_url(url)
    if location.kind != "postgresql" or _database_exists(location.env) is not False:
        return False
    import psycopg
    from psycopg import sql

    name = location.env["POSTGRES_DBNAME"]
    try:
        with _maintenance_connection(location.env) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.errors.DuplicateDatabase:
        return False  # another process created it first
    except psycopg.Error as e:
        raise StoreError(
            f"cannot create the database {name!r} for store {location.display}: "
            f"{' '.join(str(e).split())}; {_how_to_create(location.env)}"
        ) from e
    return True


def _database_exists(env: Mapping[str, str]) -> bool | None:
    """Whether the server of a PostgreSQL store has its database (asked of the ``postgres``
    maintenance database); None when that cannot be asked."""
    import psycopg

    try:
        with _maintenance_connection(env) as admin:
            found = admin.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (env["POSTGRES_DBNAME"],)
            ).fetchone()
    except psycopg.Error:
        return None
    return found is not None


def _maintenance_connection(env: Mapping[str, str]) -> Any:
    import psycopg

    return psycopg.connect(
        dbname="postgres",
        host=env["POSTGRES_HOST"],
        port=env["POSTGRES_PORT"],
        user=env["POSTGRES_USER"],
        password=env.get("POSTGRES_PASSWORD") or None,
        connect_timeout=max(1, int(env.get("POSTGRES_CONNECT_TIMEOUT") or 5)),
        autocommit=True,
    )


def _how_to_create(env: Mapping[str, str]) -> str:
    host, port, user, name = (
        env[k] for k in ("POSTGRES_HOST", "POSTGRES_PORT", "POSTGRES_USER", "POSTGRES_DBNAME")
    )
    return (
        f"create it with `createdb -h {host} -p {port} -U {user} {shlex.quote(name)}`, or copy "
        "sessions into it with `compaction copy --to URL`, which creates it"
    )


def _open_application(name: str, env: dict[str, str]) -> SessionApplication:
    """The application, retried when another process creates the same tables at the same moment
    (PostgreSQL then reports "tuple concurrently updated" for the concurrent ``CREATE OR REPLACE
    FUNCTION``, or a duplicate ``pg_type`` row for ``CREATE TABLE``)."""
    for attempt in range(1, OPEN_ATTEMPTS + 1):
        try:
            return SessionApplication(env, name=name)
        except Exception as e:
            if attempt == OPEN_ATTEMPTS or not any(m in str(e) for m in _CONCURRENT_DDL):
                raise
            time.sleep(0.05 * attempt)
    raise AssertionError("unreachable")  # pragma: no cover
