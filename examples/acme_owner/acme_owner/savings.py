"""``acme_savings``: per session, its owner and the tokens its committed compactions saved (what a
compaction shadowed minus what its summary costs); :func:`saved_per_user` totals them by user.

Only the fold is written here: the library keeps each session's state with the view's tracking
record (:class:`projections.fold.FoldProjection`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

import msgspec

from acme_owner.events import OwnerSet
from compaction.sessions.events import SessionEvent
from compaction.vocabulary.events import CompactEnd, CompactSummary
from projections.fold import FoldProjection
from projections.tables import Row, Table, table
from projections.views.base import ViewRecorder

SAVINGS = table("acme_savings", ("session_id",), session_id="text", owner="text", saved="int")


class Savings(msgspec.Struct, frozen=True):
    owner: str | None = None
    saved: int = 0
    pending: dict[str, int] = {}  # compaction id -> tokens it saves once it commits


class SavingsProjection(FoldProjection[Savings]):
    name = "acme_savings"
    state_type: ClassVar[type] = Savings
    view_tables: ClassVar[tuple[Table, ...]] = (SAVINGS,)

    def initial(self) -> Savings:
        return Savings()

    def evolve(self, state: Savings, event: SessionEvent) -> Savings:
        if isinstance(event, OwnerSet):
            return msgspec.structs.replace(state, owner=event.user)
        if isinstance(event, CompactSummary):
            saved = event.shadowed_token_count - event.summary_token_count
            return msgspec.structs.replace(state, pending={**state.pending, event.compaction_id: saved})
        if isinstance(event, CompactEnd) and event.compaction_id in state.pending:
            pending = dict(state.pending)
            saved = pending.pop(event.compaction_id)
            total = state.saved + (saved if event.error is None else 0)
            return msgspec.structs.replace(state, saved=total, pending=pending)
        return state

    def view_rows(self, key: str, state: Savings) -> Iterable[tuple[str, Row]]:
        yield SAVINGS.name, (key, state.owner, state.saved)


def saved_per_user(view: ViewRecorder) -> dict[str, int]:
    """Tokens saved by committed compactions, totalled per owner (sessions with none left out)."""
    totals: dict[str, int] = {}
    for owner, saved in view.select(SAVINGS.name, ("owner", "saved")):
        if owner is not None:
            totals[owner] = totals.get(owner, 0) + saved
    return totals
