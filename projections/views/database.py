"""Where a store's views live, and the recorders that write them.

- SQLite store ``PATH/NAME.db``: the views file ``PATH/NAME.views.db`` next to it (eventsourcing
  keeps one file per application and one per view; all our views share that file, each with its own
  ``<projection>_tracking`` table). Pass ``views_path`` to put it elsewhere.
- PostgreSQL store: the same database (and schema), the views' own tables.
- ``memory://`` store: in-memory views that live as long as the store object.
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

from eventsourcing.persistence import InfrastructureFactory, PersistenceError
from eventsourcing.postgres import PostgresFactory
from eventsourcing.sqlite import SQLiteFactory
from eventsourcing.utils import Environment

from compaction.errors import ProjectionConfigError, ViewStoreError
from compaction.sessions.store import SessionStore
from projections.tables import Table
from projections.views.base import ViewRecorder
from projections.views.memory import MemoryView
from projections.views.postgres import PostgresView
from projections.views.sqlite import SQLiteView

_MEMORY_VIEWS: weakref.WeakKeyDictionary[SessionStore, dict[str, MemoryView]] = weakref.WeakKeyDictionary()
_PG_KEYS = (
    "POSTGRES_DBNAME",
    "POSTGRES_HOST",
    "POSTGRES_PORT",
    "POSTGRES_USER",
    "POSTGRES_PASSWORD",
    "POSTGRES_SCHEMA",
    "POSTGRES_LOCK_TIMEOUT",
    "POSTGRES_CONNECT_TIMEOUT",
)


def default_views_path(store_path: str, tag: int = 0) -> str:
    """``dir/sessions.db`` -> ``dir/sessions.views.db``; an in-memory SQLite store gets in-memory
    views named by ``tag`` (the store object's id: they live as long as the process)."""
    if ":memory:" in store_path or "mode=memory" in store_path:
        return f"file:compaction-views-{tag:x}?mode=memory&cache=shared"
    path = Path(store_path)
    return str(path.with_name(f"{path.stem}.views.db"))


def nats_views_path(stream: str) -> str:
    """The views of a JetStream store whose stream is ``stream``: ``./.compaction/STREAM.views.db``
    (a SQLite file of the machine that runs the projections; another with ``--views``)."""
    return str(Path(".compaction") / f"{stream}.views.db")


class ViewDatabase:
    """The views of one store: opens each projection's :class:`ViewRecorder` on its backend."""

    def __init__(self, store: SessionStore, views_path: str | None = None) -> None:
        self.store = store
        self._factory: SQLiteFactory | PostgresFactory | None = None
        backend, settings = store.backend, store.settings
        if backend in ("sqlite", "nats"):
            self.kind = "sqlite"
            if backend == "sqlite":
                store_path = settings["SQLITE_DBNAME"]
                self.location = views_path or default_views_path(store_path, id(store))
            else:  # a JetStream store: the views in a SQLite file of this machine
                self.location = views_path or nats_views_path(settings["NATS_STREAM"])
            env = {
                "PERSISTENCE_MODULE": "eventsourcing.sqlite",
                "SQLITE_DBNAME": self.location,
                "SQLITE_LOCK_TIMEOUT": settings.get("SQLITE_LOCK_TIMEOUT") or "10",
            }
            if "mode=memory" not in self.location:
                Path(self.location).parent.mkdir(parents=True, exist_ok=True)
            self._factory = self._open_factory(env, SQLiteFactory)
        elif backend == "postgresql":
            self._reject_views_path(views_path, "PostgreSQL")
            self.kind = "postgresql"
            env = {k: v for k in _PG_KEYS if (v := settings.get(k)) is not None}
            env |= {
                "PERSISTENCE_MODULE": "eventsourcing.postgres",
                "POSTGRES_POOL_SIZE": "1",
                "POSTGRES_MAX_OVERFLOW": "2",
            }
            self._factory = self._open_factory(env, PostgresFactory)
            self.location = f"{settings.get('POSTGRES_HOST')}/{settings.get('POSTGRES_DBNAME')}"
        elif backend == "memory":
            self._reject_views_path(views_path, "memory://")
            self.kind = "memory"
            self.location = "memory"
        else:
            raise ProjectionConfigError(
                f"projections: the store's recorder {backend} is not one of the supported "
                "backends (SQLite, PostgreSQL, NATS JetStream, in-memory)"
            )

    @staticmethod
    def _reject_views_path(views_path: str | None, backend: str) -> None:
        if views_path is not None:
            where = "in its own database" if backend == "PostgreSQL" else "in memory"
            raise ProjectionConfigError(
                f"projections: a views path ({views_path!r}) applies to SQLite stores only; a "
                f"{backend} store keeps its views {where}"
            )

    @staticmethod
    def _open_factory(env: dict[str, str], cls: type[Any]) -> Any:
        try:
            factory = InfrastructureFactory.construct(Environment("views", env))
        except (OSError, PersistenceError) as e:
            raise ViewStoreError(f"projections: cannot open the views database: {e}") from e
        assert isinstance(factory, cls)
        return factory

    def recorder(self, projection: str, tables: tuple[Table, ...]) -> ViewRecorder:
        """The view of ``projection`` (its tables are created when missing)."""
        if self.kind == "memory":
            views = _MEMORY_VIEWS.setdefault(self.store, {})
            view = views.get(projection)
            if view is None:
                view = views[projection] = MemoryView(projection=projection, tables=tables)
            return view
        try:
            if isinstance(self._factory, SQLiteFactory):
                made: ViewRecorder = SQLiteView(self._factory.datastore, projection=projection, tables=tables)
            else:
                assert isinstance(self._factory, PostgresFactory)
                made = PostgresView(self._factory.datastore, projection=projection, tables=tables)
            made.create_table()
            made.location = self.location
        except PersistenceError as e:
            raise ViewStoreError(
                f"projections: cannot create the {projection!r} view in {self.location}: {e}"
            ) from e
        return made

    def close(self) -> None:
        if self._factory is not None:
            self._factory.close()
            self._factory = None

    def __enter__(self) -> ViewDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
