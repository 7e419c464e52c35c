"""Running projections: rebuild from scratch, catch up incrementally, follow the log until stopped.

One :class:`ProjectionRunner` reads the store's notification log in batches, decoded once by the
store (:meth:`~compaction.sessions.store.SessionStore.notifications`; when following, from
:meth:`~compaction.sessions.store.SessionStore.follow`: a durable consumer named
:attr:`ProjectionRunner.follower_name` on JetStream, acknowledged after each committed batch, else
the recorder's eventsourcing subscription),
feeds each event to every selected projection whose tracking position is behind it, and commits
each projection's rows with its tracking record (one transaction per projection per batch). A
runner killed at any moment resumes from the tracking records: a batch is either wholly in a view
or not at all, and a tracking position is never recorded twice, so nothing is applied twice.

Run ONE runner per view at a time; a second one fails with
:class:`~compaction.errors.TrackingConflictError` instead of corrupting anything.

A follower (:meth:`ProjectionRunner.run_forever`) rides out a store or a view database it cannot
reach (a PostgreSQL restart, a failover, a terminated connection): it waits with backoff
(:class:`Reconnect`), takes each view's tracking record as its position again, catches up and
follows on. It ends only when stopped, or after :attr:`Reconnect.attempts` failed attempts in a row
(:class:`~compaction.errors.FollowerGaveUpError`, naming the last error and the views' position).
"""

from __future__ import annotations

import hashlib
import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

from eventsourcing.persistence import PersistenceError, Tracking

from compaction.engine.meters import Meter
from compaction.errors import (
    FollowerGaveUpError,
    ProjectionConfigError,
    ProjectionFoldError,
    ProjectionTimeoutError,
    SessionNotFoundError,
    StoreError,
    UnreadableRowError,
)
from compaction.sessions.plugins import plugin_classes
from compaction.sessions.polling import DEFAULT_POLL_INTERVAL
from compaction.sessions.store import NotificationFeed, SessionStore, StoredNotification
from projections.base import DEFAULT_MAX_CACHED_SESSIONS, SessionProjection
from projections.ledger import LedgerProjection
from projections.surface_view import SurfaceProjection
from projections.usage import UsageProjection
from projections.views.base import ViewRecorder
from projections.views.database import ViewDatabase

PROJECTIONS: dict[str, type[SessionProjection[Any]]] = {
    SurfaceProjection.name: SurfaceProjection,
    LedgerProjection.name: LedgerProjection,
    UsageProjection.name: UsageProjection,
}
ALL = tuple(PROJECTIONS)
"""The library's own projections (:func:`projection_names` adds the installed plugins')."""
PROJECTIONS_GROUP = "compaction.projections"


def load_projections() -> dict[str, type[SessionProjection[Any]]]:
    """Add the projections of every ``compaction.projections`` entry point to
    :data:`PROJECTIONS` (under their ``name``; the library's own names are never replaced) and
    return them all. A plugin that cannot be loaded is logged and left out."""
    base: type[SessionProjection[Any]] = SessionProjection  # type: ignore[type-abstract]
    for entry, cls in plugin_classes(PROJECTIONS_GROUP, base, "projection"):
        name = cls.name or entry
        if not cls.name or PROJECTIONS.get(name, cls) is not cls:
            log.warning("projection plugin %r: its name %r is empty or taken; left out", entry, name)
            continue
        PROJECTIONS[name] = cls
    return PROJECTIONS


def projection_names() -> tuple[str, ...]:
    """Every projection a runner can run: the library's, then the installed plugins'."""
    return tuple(load_projections())


DEFAULT_BATCH_SIZE = 2000

OnBatch = Callable[[int], None]
"""Called after each committed batch with the number of notifications it held."""

log = logging.getLogger("projections")


@dataclass(frozen=True)
class Reconnect:
    """How a follower rides out a store or views it cannot reach: after the n-th failure in a row
    it waits ``first_delay * 2 ** (n - 1)`` seconds (at most ``max_delay``) and tries again; after
    ``attempts`` failures in a row it gives up. A committed batch, or a catch-up that reached the
    end of the log, resets the count."""

    attempts: int = 20
    first_delay: float = 0.5
    max_delay: float = 15.0

    def __post_init__(self) -> None:
        if not isinstance(self.attempts, int) or self.attempts < 0:
            raise ProjectionConfigError(
                f"projection runner: reconnect attempts must be an integer >= 0; got {self.attempts!r}"
            )
        _check_positive("reconnect first_delay", self.first_delay)
        _check_positive("reconnect max_delay", self.max_delay)

    def delay(self, failures: int) -> float:
        return float(min(self.max_delay, self.first_delay * 2 ** max(0, failures - 1)))


def reconnectable(error: BaseException) -> bool:
    """A failure to reach the store or a view (worth waiting out), not one of the log's content."""
    if isinstance(error, (UnreadableRowError, SessionNotFoundError)):
        return False
    return isinstance(error, (StoreError, PersistenceError))


@dataclass(frozen=True)
class ProjectionReport:
    """What a run did to one view: notifications applied, rows now in it, tracking position."""

    name: str
    events: int
    rows: int
    position: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "events": self.events, "rows": self.rows, "position": self.position}


def resolve_names(names: Sequence[str]) -> tuple[str, ...]:
    """``["all"]`` -> every projection, plugins included; unknown names raise
    :class:`ProjectionConfigError`."""
    known = projection_names()
    chosen: list[str] = []
    for name in names:
        for one in known if name == "all" else (name,):
            if one not in PROJECTIONS:
                raise ProjectionConfigError(
                    f"unknown projection {one!r}; expected one of {', '.join(known)} or all"
                )
            if one not in chosen:
                chosen.append(one)
    if not chosen:
        raise ProjectionConfigError(f"no projection selected; expected one of {', '.join(known)} or all")
    return tuple(chosen)


def _chosen(
    projections: Sequence[str | type[SessionProjection[Any]]],
) -> list[type[SessionProjection[Any]]]:
    """The classes to run: names (``all`` included) resolved, classes taken as they are (a view
    of one's own, unregistered); one name twice is refused."""
    names = (
        resolve_names([p for p in projections if isinstance(p, str)])
        if any(isinstance(p, str) for p in projections)
        else ()
    )
    chosen = [PROJECTIONS[name] for name in names]
    for given in projections:
        if isinstance(given, str):
            continue
        if not given.name or any(c.name == given.name and c is not given for c in chosen):
            raise ProjectionConfigError(
                f"projection {given.__qualname__}: its name {given.name!r} is empty or names "
                "another selected projection"
            )
        if given not in chosen:
            chosen.append(given)
    if not chosen:
        raise ProjectionConfigError("no projection selected")
    return chosen


class ProjectionRunner:
    """Projections of one store, run over its notification log: by name (the library's own, the
    installed plugins', ``all``) or as classes. Close it (or use ``with``)."""

    def __init__(
        self,
        store: SessionStore,
        projections: Sequence[str | type[SessionProjection[Any]]] = ("all",),
        *,
        views_path: str | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        meter: Meter | None = None,
        max_cached_sessions: int = DEFAULT_MAX_CACHED_SESSIONS,
        reconnect: Reconnect | None = None,
    ) -> None:
        chosen = _chosen(projections)
        _check_positive("batch_size", batch_size)
        _check_positive("poll_interval", poll_interval)
        _check_positive("max_cached_sessions", max_cached_sessions)
        self.store = store
        self.database = ViewDatabase(store, views_path)
        try:
            self.projections = [self._build(c, meter, max_cached_sessions) for c in chosen]
        except BaseException:
            self.database.close()
            raise
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        self.reconnect = reconnect or Reconnect()
        self.reconnections = 0  # connections lost and re-established while following
        self._keys: dict[UUID, str] = {}

    def _build(
        self, cls: type[SessionProjection[Any]], meter: Meter | None, cache: int
    ) -> SessionProjection[Any]:
        view = self.database.recorder(cls.name, cls.tables)
        if cls is UsageProjection:
            return UsageProjection(view, self.store, meter=meter, max_cached_sessions=cache)
        return cls(view, self.store, max_cached_sessions=cache)

    # ------------------------------------------------------------ state

    @property
    def views(self) -> dict[str, ViewRecorder]:
        return {p.name: p.view for p in self.projections}

    @property
    def position(self) -> int:
        """The lowest tracking position among the selected views (0: nothing applied yet)."""
        return min(p.position for p in self.projections)

    @property
    def follower_name(self) -> str:
        """The name this runner follows the log by, where the store keeps followers (JetStream's
        durable consumers): the projections and a digest of the host and the views' location, so
        runners of other views (another file, another machine) never share a consumer, and a
        runner restarted on these views resumes the same one."""
        names = "-".join(p.name for p in self.projections)
        location = self.database.location
        if self.database.kind == "sqlite" and "mode=memory" not in location:
            location = str(Path(location).resolve())
        where = hashlib.sha256(f"{socket.gethostname()}\n{location}".encode()).hexdigest()[:12]
        return f"views_{names}_{where}"

    def behind(self) -> int:
        """How many notifications the slowest view has still to apply (counted by the store: ids
        can skip, on JetStream they follow the stream sequence)."""
        return self.store.count_notifications(self.position, self.store.max_notification_id())

    def reports(self) -> list[ProjectionReport]:
        return [ProjectionReport(p.name, p.applied, p.rows(), p.position) for p in self.projections]

    # ------------------------------------------------------------ running

    def rebuild(self, on_batch: OnBatch | None = None) -> list[ProjectionReport]:
        """Drop the selected views and their tracking, then catch up from notification 1."""
        for projection in self.projections:
            projection.drop()
        return self.catch_up(on_batch)

    def catch_up(
        self, on_batch: OnBatch | None = None, stop: threading.Event | None = None
    ) -> list[ProjectionReport]:
        """Apply every notification after the tracking positions; return once the log is
        exhausted (or ``stop`` is set)."""
        while not (stop is not None and stop.is_set()) and self.step(on_batch):
            pass
        return self.reports()

    def run_forever(self, stop: threading.Event, on_batch: OnBatch | None = None) -> list[ProjectionReport]:
        """Catch up, then follow new notifications until ``stop`` is set; the batch under way when
        it is set is finished and recorded first. A lost store or view is waited out and the run
        resumes from the views' tracking records (:class:`Reconnect`)."""
        failures = 0

        def connected(notifications: int = 0) -> None:
            nonlocal failures
            failures = 0
            if notifications and on_batch is not None:
                on_batch(notifications)

        while not stop.is_set():
            try:
                if failures:
                    for projection in self.projections:
                        projection.resync()
                self._follow(stop, connected)
                break
            except Exception as e:
                if not reconnectable(e):
                    raise
                failures += 1
                self._wait_out(e, failures, stop)
        return self.reports()

    def _follow(self, stop: threading.Event, connected: Callable[[int], None]) -> None:
        self.catch_up(connected, stop)
        if stop.is_set():
            return
        connected(0)
        feed = self.store.follow(self.position, poll_interval=self.poll_interval, durable=self.follower_name)
        with feed, _stopped_by(stop, feed):
            while True:
                batch = self._gather(feed)
                if not self._commit(batch, connected):
                    break
                feed.processed(batch[-1].notification_id)  # tracked: a durable consumer acks

    def _wait_out(self, error: Exception, failures: int, stop: threading.Event) -> None:
        """Give up after too many failures in a row; else wait (or until stopped)."""
        policy = self.reconnect
        if failures > policy.attempts:
            raise FollowerGaveUpError(
                f"projection runner: gave up after {failures} failed attempts in a row to reach "
                f"the store or its views (the last: {error}); the views are at notification "
                f"{self.position}, and a restarted follower resumes from there"
            ) from error
        delay = policy.delay(failures)
        log.warning(
            "projection runner: lost the store or a view at notification %d (%s); reconnecting "
            "in %.1f s (attempt %d of %d)",
            self.position, error, delay, failures, policy.attempts,
        )  # fmt: skip
        self.store.drop_broken_connections()
        for projection in self.projections:
            projection.view.drop_broken_connections()
        if not stop.wait(delay):
            self.reconnections += 1

    def step(self, on_batch: OnBatch | None = None) -> int:
        """Read, fold and commit one batch; return how many notifications it held (0: none left)."""
        with _fold_errors():
            batch = self.store.notifications(self.position, self.batch_size)
        return self._commit(batch, on_batch)

    def _gather(self, feed: NotificationFeed) -> list[StoredNotification]:
        """The next batch from ``feed``: waits for its first notification, then takes those
        already stored (up to the batch size); empty once the feed is stopped."""
        batch: list[StoredNotification] = []
        top = 0
        with _fold_errors():
            for notification in feed:
                if notification.notification_id <= self.position:
                    continue  # the feed started before a view caught up
                batch.append(notification)
                if len(batch) >= self.batch_size:
                    break
                if notification.notification_id >= top:
                    top = self.store.max_notification_id()
                    if notification.notification_id >= top:
                        break
        return batch

    def _commit(self, batch: list[StoredNotification], on_batch: OnBatch | None) -> int:
        """Fold ``batch`` into every view behind it and commit each with its tracking record."""
        if not batch:
            return 0
        last = batch[-1].notification_id
        active = [p for p in self.projections if p.position < last]
        try:
            for projection in active:
                projection.check_position()
            self._fold(batch, active)
            tracking = Tracking(self.store.name, last)
            for projection in active:
                applied = sum(1 for n in batch if n.notification_id > projection.position)
                projection.commit(tracking, applied)
        except BaseException:
            for projection in active:
                projection.discard()
            raise
        if on_batch is not None:
            on_batch(len(batch))
        return len(batch)

    def _fold(self, batch: list[StoredNotification], active: list[SessionProjection[Any]]) -> None:
        """Fold each event into every view that has not applied it yet."""
        keys = self._keys
        first = batch[0].notification_id
        if all(p.position < first for p in active):
            appliers = [p.apply for p in active]
            for n in batch:
                key = keys.get(n.session_id) or self._key(n.session_id)
                for apply in appliers:
                    apply(n.notification_id, key, n.event)
            return
        for n in batch:  # a view is ahead of another: skip what it already has
            key = keys.get(n.session_id) or self._key(n.session_id)
            for projection in active:
                if n.notification_id > projection.position:
                    projection.apply(n.notification_id, key, n.event)

    def _key(self, session_id: UUID) -> str:
        """The session's key in the views, the canonical text of its id (built once per id)."""
        if len(self._keys) > _MAX_KEYS:
            self._keys.clear()
        key = self._keys[session_id] = str(session_id)
        return key

    def wait(self, notification_id: int, timeout: float = 1.0) -> None:
        """Block until every selected view has recorded ``notification_id`` (eventsourcing's
        ``TrackingRecorder.wait``); raise :class:`ProjectionTimeoutError` after ``timeout``."""
        for projection in self.projections:
            try:
                projection.view.wait(self.store.name, notification_id, timeout=timeout)
            except TimeoutError as e:
                raise ProjectionTimeoutError(
                    f"projection {projection.name!r} did not record notification "
                    f"{notification_id} within {timeout:g} s (it is at {projection.position})"
                ) from e

    # ------------------------------------------------------------ lifecycle

    def close(self) -> None:
        self.database.close()

    def __enter__(self) -> ProjectionRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_MAX_KEYS = 100_000


@contextmanager
def _fold_errors() -> Iterator[None]:
    """A stored row that does not decode stops the batch as a fold error of the ``decode`` step."""
    try:
        yield
    except UnreadableRowError as e:
        raise ProjectionFoldError(
            "decode",
            e.session_id,
            e.seq,
            e.notification_id,
            f"the stored {e.event_type} row cannot be decoded: {e.reason}",
        ) from e


@contextmanager
def _stopped_by(stop: threading.Event, feed: NotificationFeed) -> Iterator[None]:
    """Stop ``feed`` as soon as ``stop`` is set (a blocked read then ends), from a watcher thread
    that ends with the block."""
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            if stop.wait(_WATCH_INTERVAL):
                feed.stop()
                return

    watcher = threading.Thread(target=watch, name="projection-runner-stop", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        feed.stop()
        watcher.join()


_WATCH_INTERVAL = 0.05


def _check_positive(name: str, value: float) -> None:
    if not value > 0:
        raise ProjectionConfigError(f"projection runner: {name} must be positive; got {value!r}")


@contextmanager
def stop_on_signals(
    stop: threading.Event, signals: Sequence[signal.Signals] = (signal.SIGTERM, signal.SIGINT)
) -> Iterator[threading.Event]:
    """Set ``stop`` on SIGTERM / SIGINT (main thread only) instead of dying mid-batch."""

    def handler(signum: int, frame: object) -> None:
        stop.set()

    previous = {s: signal.signal(s, handler) for s in signals}
    try:
        yield stop
    finally:
        for s, old in previous.items():
            signal.signal(s, old)
