"""What every projection shares: per-session fold state, atomic batches.

A :class:`SessionProjection` is an eventsourcing ``Projection`` whose view is a
:class:`~projections.views.ViewRecorder`. It folds events one at a time (:meth:`apply`) into
per-session state kept in memory while the runner runs, collects the rows they change, and writes
them with the tracking record in one transaction per batch (:meth:`commit`). Incremental work is
O(new events): a session's state is loaded once per run, the first time one of its events arrives
(from the view's own rows, or from the store's aggregate for the usage view); beyond
``max_cached_sessions`` the least recently used states are dropped after a commit and reloaded when
their session comes back.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar, Generic, TypeVar
from uuid import UUID

from eventsourcing.persistence import IntegrityError, PersistenceError, Tracking
from eventsourcing.projection import Projection

from compaction.errors import (
    EventCompactionError,
    ProjectionFoldError,
    StoreError,
    TrackingConflictError,
    ViewStoreError,
)
from compaction.sessions.events import SessionEvent
from compaction.sessions.mapper import EventEnvelope
from compaction.sessions.store import SessionStore
from compaction.sessions.surface import EventLookup, Plan, Surface
from projections.tables import Changes, Table
from projections.views.base import ViewRecorder

S = TypeVar("S")

DEFAULT_MAX_CACHED_SESSIONS = 10_000


def plan_or_advance(surface: Surface, event: SessionEvent, lookup: EventLookup) -> Plan | None:
    """The surface fold of ``event``: its validated plan, or None for a well-formed log-only event,
    whose whole fold is the length moving on (done here, without allocating a plan). Anything else,
    a malformed log-only event included, goes through :meth:`Surface.plan` and its errors."""
    if (
        not event.SURFACE
        and event.seq == surface.length
        and event.surface_op is None
        and event.source_event_seqs is None
    ):
        surface.length = event.seq + 1
        return None
    return surface.plan(event, lookup)


class SessionProjection(Projection[ViewRecorder], Generic[S]):
    """A projection of the session log with per-session state ``S``.

    Sessions are named by their key, the canonical text of the session id (``str(UUID)``): the
    form the view rows store, and a cheap dictionary key.
    """

    name: str = ""
    tables: ClassVar[tuple[Table, ...]] = ()

    def __init__(
        self,
        view: ViewRecorder,
        store: SessionStore,
        *,
        max_cached_sessions: int = DEFAULT_MAX_CACHED_SESSIONS,
    ) -> None:
        super().__init__(view)
        self.store = store
        self.application_name = store.name
        self.max_cached_sessions = max_cached_sessions
        self.changes = Changes()
        self.position: int = view.max_tracking_id(store.name) or 0
        self.applied = 0  # notifications committed since this object was made (or dropped)
        self._states: dict[str, S] = {}
        self._touched: dict[str, S] = {}
        self._empty_view = False  # after a drop: a session not in memory is new (or evicted)
        self._evicted: set[str] = set()

    # ------------------------------------------------------------ what each projection defines

    @abstractmethod
    def new_state(self, key: str) -> S:
        """State of a session the view has never seen."""

    @abstractmethod
    def load_state(self, key: str) -> S | None:
        """State of a session as the view holds it (None when the view has no trace of it)."""

    @abstractmethod
    def fold(self, state: S, event: SessionEvent) -> None:
        """Fold one event into ``state`` and record the rows it changes in :attr:`changes`."""

    def flush(self, state: S) -> None:
        """Record per-session rows of a session touched in this batch (called before a write)."""

    # ------------------------------------------------------------ folding

    def apply(self, notification_id: int, key: str, event: SessionEvent) -> None:
        """Fold one event of session ``key`` (not written until :meth:`commit`)."""
        state = self._touched.get(key)
        if state is None:
            state = self._touched[key] = self.state(key)
        try:
            self.fold(state, event)
        except EventCompactionError as e:
            raise ProjectionFoldError(self.name, key, event.seq, notification_id, str(e)) from e

    def state(self, key: str) -> S:
        """The session's state, loaded on first use; marks it most recently used."""
        state = self._states.pop(key, None)
        if state is None:
            loaded = None
            if not self._empty_view or key in self._evicted:
                loaded = self.load_state(key)
                self._evicted.discard(key)
            state = loaded if loaded is not None else self.new_state(key)
        self._states[key] = state
        return state

    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        """eventsourcing's projection API: fold one event and record it with its tracking."""
        assert isinstance(domain_event, EventEnvelope)
        if tracking.notification_id <= self.position:
            raise TrackingConflictError(self.name, tracking.notification_id - 1, self.position)
        self.check_position()
        try:
            self.apply(tracking.notification_id, str(domain_event.originator_id), domain_event.event)
        except BaseException:
            self.discard()
            raise
        self.commit(tracking, 1)

    def check_position(self) -> None:
        """Refuse to fold when the view's tracking record moved under us (another runner wrote
        this view, or dropped it): states loaded from it would not match our position."""
        try:
            recorded = self.view.max_tracking_id(self.application_name) or 0
        except PersistenceError as e:
            raise ViewStoreError(
                f"projection {self.name!r}: reading the tracking record in {self.view.location} failed: {e}"
            ) from e
        if recorded != self.position:
            self.discard()
            self._states.clear()
            self._empty_view = False  # whatever we knew about the view no longer holds
            self._evicted.clear()
            raise TrackingConflictError(self.name, self.position, recorded)

    def resync(self) -> None:
        """After a lost connection: take the view's tracking record as this projection's position.
        A batch whose commit went through while its answer was lost is then not applied twice;
        every cached state is reloaded from the view when next needed."""
        self.discard()
        try:
            recorded = self.view.max_tracking_id(self.application_name) or 0
        except PersistenceError as e:
            raise ViewStoreError(
                f"projection {self.name!r}: reading the tracking record in {self.view.location} failed: {e}"
            ) from e
        if recorded != self.position:
            self._states.clear()
            self._empty_view = False
            self._evicted.clear()
            self.position = recorded

    # ------------------------------------------------------------ writing

    def commit(self, tracking: Tracking, notifications: int) -> None:
        """Write the batch's rows and ``tracking`` in one transaction; ``notifications`` is how
        many notifications the batch applied (for reports)."""
        for state in self._touched.values():
            self.flush(state)
        try:
            self.view.write(self.changes, tracking)
        except IntegrityError as e:
            self.discard()
            raise TrackingConflictError(self.name, self.position, self._recorded()) from e
        except PersistenceError as e:
            self.discard()
            raise ViewStoreError(
                f"projection {self.name!r}: writing {len(self.changes)} rows up to notification "
                f"{tracking.notification_id} to {self.view.location} failed: {e}"
            ) from e
        self.position = tracking.notification_id
        self.applied += notifications
        self.changes.clear()
        self._touched.clear()
        self._evict()

    def _recorded(self) -> int | None:
        try:
            return self.view.max_tracking_id(self.application_name)
        except PersistenceError:
            return None

    def discard(self) -> None:
        """Forget uncommitted work; touched sessions are reloaded from the view when next needed."""
        self.changes.clear()
        for key in self._touched:
            self._forget(key)
        self._touched.clear()

    def _forget(self, key: str) -> None:
        self._states.pop(key, None)
        if self._empty_view:
            self._evicted.add(key)

    def _evict(self) -> None:
        excess = len(self._states) - self.max_cached_sessions
        for key in list(self._states)[: max(0, excess)]:
            self._forget(key)

    def drop(self) -> None:
        """Empty the view and its tracking record; the next batch starts from notification 1."""
        try:
            self.view.drop(self.application_name)
        except PersistenceError as e:
            raise ViewStoreError(
                f"projection {self.name!r}: dropping the view in {self.view.location} failed: {e}"
            ) from e
        self.changes.clear()
        self._states.clear()
        self._touched.clear()
        self._evicted.clear()
        self._empty_view = True
        self.position = 0
        self.applied = 0

    def rows(self) -> int:
        try:
            return self.view.rows()
        except PersistenceError as e:
            raise ViewStoreError(
                f"projection {self.name!r}: counting rows in {self.view.location} failed: {e}"
            ) from e

    # ------------------------------------------------------------ helpers for subclasses

    def lookup(self, key: str) -> EventLookup:
        """An event lookup for the surface fold (only tool-result rewrites ask for one)."""
        session_id = UUID(key)

        def find(seq: int) -> SessionEvent:
            found = self.store.load_events(session_id, seq, seq + 1)
            if not found:
                raise StoreError(f"session {session_id} has no stored event at seq {seq}")
            return found[0]

        return find
