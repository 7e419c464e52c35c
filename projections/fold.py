"""Projections whose fold state the library keeps: the view author writes only the fold.

A :class:`FoldProjection` names its state type (anything msgspec encodes: a ``msgspec.Struct``, a
dataclass, a dict) and two pure functions: :meth:`~FoldProjection.initial` (the state of a session
nothing was folded into yet) and :meth:`~FoldProjection.evolve` (the next state from a state and
one event; return a new value, never change the one given). The library does the rest:

- each session's state is a row of the view's state table ``<name>_state(session_id, state)``
  (the state as JSON), written in the same transaction as the view's tracking record, so a runner
  killed at any moment resumes from a state that matches its position, and nothing is folded
  twice;
- a state is loaded once per run, the first time its session appears, and kept in memory while
  the runner runs (the runner's LRU bound applies);
- optional rows of the view's own tables come from :meth:`~FoldProjection.view_rows`, written in the
  same transaction.

Register one with the ``compaction.projections`` entry point group (its ``name`` is the view's
name) and ``compaction rebuild [--follow]`` and :class:`~projections.runner.ProjectionRunner` run
it. Read it with :meth:`FoldProjection.state_of` / :meth:`FoldProjection.states`.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable
from typing import Any, ClassVar, Generic, TypeVar
from uuid import UUID

import msgspec

from compaction.errors import EventCompactionError, ProjectionConfigError, ProjectionFoldError
from compaction.sessions.events import SessionEvent
from projections.base import SessionProjection
from projections.tables import Row, Table, table
from projections.views.base import ViewRecorder

S = TypeVar("S")


class Held(Generic[S]):
    """One session's state while the runner runs (the value is replaced, never changed)."""

    __slots__ = ("key", "value")

    def __init__(self, key: str, value: S) -> None:
        self.key = key
        self.value = value


def state_table(name: str) -> Table:
    """The table a fold projection keeps its per-session states in."""
    return table(f"{name}_state", ("session_id",), session_id="text", state="text")


class FoldProjection(SessionProjection[Held[S]]):
    """A projection defined by its fold alone; see the module documentation."""

    state_type: ClassVar[Any] = dict
    """The type of the state (what :meth:`initial` and :meth:`evolve` return), for decoding it."""
    view_tables: ClassVar[tuple[Table, ...]] = ()
    """The view's own tables, filled by :meth:`view_rows` (besides the state table)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.name:
            cls.tables = (state_table(cls.name), *cls.view_tables)

    # ------------------------------------------------------------ what a view author writes

    @abstractmethod
    def initial(self) -> S:
        """The state of a session nothing was folded into."""

    @abstractmethod
    def evolve(self, state: S, event: SessionEvent) -> S:
        """The state after ``event`` (pure: a new value, ``state`` left as it was)."""

    def view_rows(self, key: str, state: S) -> Iterable[tuple[str, Row]]:
        """Rows of :attr:`view_tables` for session ``key`` in ``state`` (``(table name, row)``),
        upserted by their key when the batch is written; none by default."""
        return ()

    # ------------------------------------------------------------ what the library does

    def new_state(self, key: str) -> Held[S]:
        return Held(key, self.initial())

    def load_state(self, key: str) -> Held[S] | None:
        found = self.view.select(self._state_table, ("state",), {"session_id": key})
        if not found:
            return None
        return Held(key, self._decode(found[0][0], key))

    def fold(self, state: Held[S], event: SessionEvent) -> None:
        state.value = self.evolve(state.value, event)

    def apply(self, notification_id: int, key: str, event: SessionEvent) -> None:
        try:
            super().apply(notification_id, key, event)
        except (ProjectionFoldError, EventCompactionError):
            raise
        except Exception as e:  # the author's fold failed: name the event (the batch is discarded)
            raise ProjectionFoldError(
                self.name, key, event.seq, notification_id, f"{type(e).__name__}: {e}"
            ) from e

    def flush(self, state: Held[S]) -> None:
        encoded = msgspec.json.encode(state.value).decode()
        self.changes.upsert(self._state_table, (state.key,), (state.key, encoded))
        for table_name, row in self.view_rows(state.key, state.value):
            owner = self.view.table(table_name)
            self.changes.upsert(table_name, owner.key_of(row), row)

    @property
    def _state_table(self) -> str:
        return f"{self.name}_state"

    def _decode(self, text: str, key: str) -> S:
        try:
            value: S = msgspec.json.decode(text, type=self.state_type)
        except msgspec.ValidationError as e:
            raise ProjectionConfigError(
                f"projection {self.name!r}: the stored state of session {key} does not decode as "
                f"{self.state_type!r} ({e}); its state type changed, rebuild the view"
            ) from e
        return value

    # ------------------------------------------------------------ reading the view

    @classmethod
    def state_of(cls, view: ViewRecorder, session_id: UUID) -> S | None:
        """The folded state of one session, or None when the view has not seen it."""
        found = view.select(f"{cls.name}_state", ("state",), {"session_id": str(session_id)})
        if not found:
            return None
        value: S = msgspec.json.decode(found[0][0], type=cls.state_type)
        return value

    @classmethod
    def states(cls, view: ViewRecorder) -> dict[str, S]:
        """Every session's folded state, by session id text."""
        rows = view.select(f"{cls.name}_state", ("session_id", "state"))
        return {key: msgspec.json.decode(text, type=cls.state_type) for key, text in rows}
