"""The compaction ledger: one row per compaction bracket (``compact/start`` .. ``compact/end``).

``ledger_compactions`` columns: session and compaction id, the owning turn (NULL: standalone),
strategy, the seqs of start / summary / replacement / end, the shadowed range (positional, so
``shadowed_start > shadowed_end`` is possible) and seqs (JSON list), shadowed and summary tokens
with the meter that priced them, provider, model, fidelity (JSON of ``compact/summary.fidelity``),
and the outcome:

- ``committed``: ``compact/end`` without an error;
- ``failed``: ``compact/end`` with an error (``error`` holds it);
- ``orphaned``: a ``compact/start`` with no ``compact/end`` yet; re-evaluated as events arrive, so
  an orphan that recovery closes later becomes ``failed``.

Which event belongs to which bracket, and the outcome, are :mod:`compaction.engine.brackets`' rules (the
audit and the orphan scan read brackets through them too); this projection only keeps the rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import msgspec

from compaction.engine.brackets import ORPHANED, member_of, outcome_of
from compaction.sessions.events import SessionEvent
from compaction.vocabulary.events import CompactEnd, CompactStart, CompactSummary
from projections.base import SessionProjection
from projections.tables import table
from projections.views.base import ViewRecorder

LEDGER = table(
    "ledger_compactions",
    ("session_id", "compaction_id"),
    session_id="text",
    compaction_id="text",
    turn="int",
    strategy="text",
    start_seq="int",
    summary_seq="int",
    replacement_seq="int",
    end_seq="int",
    shadowed_start="int",
    shadowed_end="int",
    shadowed_seqs="text",
    shadowed_tokens="int",
    summary_tokens="int",
    meter="text",
    provider="text",
    model="text",
    fidelity="text",
    outcome="text",
    error="text",
)
COLUMNS = LEDGER.column_names
_AT = {name: i for i, name in enumerate(COLUMNS)}


@dataclass
class LedgerState:
    key: str
    open: dict[str, list[Any]] = field(default_factory=dict)  # compaction id -> row


def _blank(key: str, compaction_id: str) -> list[Any]:
    row: list[Any] = [None] * len(COLUMNS)
    row[_AT["session_id"]], row[_AT["compaction_id"]] = key, compaction_id
    row[_AT["outcome"]] = ORPHANED
    return row


def _json(value: Any) -> str | None:
    return None if value is None else msgspec.json.encode(value).decode()


def _set(row: list[Any], **values: Any) -> None:
    for name, value in values.items():
        row[_AT[name]] = value


class LedgerProjection(SessionProjection[LedgerState]):
    name = "ledger"
    tables = (LEDGER,)

    def apply(self, notification_id: int, key: str, event: SessionEvent) -> None:
        # Only bracket members matter; skip the rest without loading state.
        if member_of(event) is not None:
            super().apply(notification_id, key, event)

    def new_state(self, key: str) -> LedgerState:
        return LedgerState(key)

    def load_state(self, key: str) -> LedgerState | None:
        state = LedgerState(key)
        where = {"session_id": state.key, "end_seq": None}
        for found in self.view.select(LEDGER.name, COLUMNS, where):
            row = list(found)
            state.open[row[_AT["compaction_id"]]] = row
        return state

    def fold(self, state: LedgerState, event: SessionEvent) -> None:
        compaction_id = member_of(event)
        if compaction_id is None:
            return
        if isinstance(event, CompactStart):
            row = _blank(state.key, event.compaction_id)
            _set(row, turn=event.turn, strategy=event.strategy, start_seq=event.seq)
            state.open[event.compaction_id] = row
        elif isinstance(event, CompactSummary):
            row = self._row(state, event.compaction_id)
            _set(
                row,
                summary_seq=event.seq,
                shadowed_start=event.shadowed_range.start,
                shadowed_end=event.shadowed_range.end,
                shadowed_seqs=_json(event.shadowed_seqs),
                shadowed_tokens=event.shadowed_token_count,
                summary_tokens=event.summary_token_count,
                meter=event.meter,
                provider=event.provider,
                model=event.model,
                fidelity=_json(event.fidelity),
            )
        elif isinstance(event, CompactEnd):
            row = self._row(state, event.compaction_id)
            state.open.pop(event.compaction_id, None)
            _set(row, end_seq=event.seq, error=event.error, outcome=outcome_of(event))
        else:  # the replacement: it joins its open bracket
            replaced = state.open.get(compaction_id)
            if replaced is None:
                return
            row = replaced
            _set(row, replacement_seq=event.seq)
        self.changes.upsert(LEDGER.name, (state.key, row[_AT["compaction_id"]]), tuple(row))

    def _row(self, state: LedgerState, compaction_id: str) -> list[Any]:
        """The bracket's row: open in memory, else stored (a repeated end), else a new one."""
        row = state.open.get(compaction_id)
        if row is not None:
            return row
        pending = self.changes.rows.get(LEDGER.name, {}).get((state.key, compaction_id))
        if pending is not None:
            return list(pending)
        stored = self.view.select(
            LEDGER.name, COLUMNS, {"session_id": state.key, "compaction_id": compaction_id}
        )
        return list(stored[0]) if stored else _blank(state.key, compaction_id)


# ---------------------------------------------------------------- reading the view


def compactions(view: ViewRecorder, session_id: UUID | None = None) -> list[dict[str, Any]]:
    """Ledger rows as dicts (``shadowed_seqs`` and ``fidelity`` decoded), by session then start."""
    where = {} if session_id is None else {"session_id": str(session_id)}
    rows = view.select(LEDGER.name, COLUMNS, where)
    start = _AT["start_seq"]
    rows.sort(key=lambda r: (r[0], r[start] is None, r[start] or 0, r[1]))
    found = []
    for row in rows:
        record = dict(zip(COLUMNS, row, strict=True))
        for name in ("shadowed_seqs", "fidelity"):
            if record[name] is not None:
                record[name] = msgspec.json.decode(record[name])
        found.append(record)
    return found
