"""A compaction's bracket, folded from the log in one place.

A bracket is one compaction's records: its ``compact/start``, its ``compact/summary``, the
replacement that put the checkpoint on the surface (a ``user/message`` whose ``surface_op`` is a
replace and whose source names the compaction), and its ``compact/end``. Its outcome follows from
the end: none yet is ``orphaned``, an end that records an error (any string, even an empty one)
``failed``, an end with no error ``committed``.

:func:`member_of` says which compaction an event belongs to; :class:`BracketFold` folds a session's
events (in seq order) into brackets by compaction id. The lock, the audit, the orphan scan and the
ledger projection all read brackets through these. A second ``compact/start`` of the same id starts
the bracket over; members of a compaction with no start are not part of any bracket.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from compaction.sessions.events import Replace, SessionEvent, UserMessage
from compaction.sessions.session import Session
from compaction.vocabulary.events import CompactEnd, CompactStart, CompactSummary

Outcome = Literal["committed", "failed", "orphaned"]
COMMITTED: Outcome = "committed"
FAILED: Outcome = "failed"
ORPHANED: Outcome = "orphaned"


def member_of(event: SessionEvent) -> str | None:
    """The compaction id ``event`` belongs to as a bracket member, or None."""
    if isinstance(event, (CompactStart, CompactSummary, CompactEnd)):
        return event.compaction_id
    if isinstance(event, UserMessage) and isinstance(event.surface_op, Replace):
        return event.message.source.compaction_id
    return None


def outcome_of(end: CompactEnd | None) -> Outcome:
    """A bracket's outcome from its ``compact/end`` (None: there is none yet)."""
    if end is None:
        return ORPHANED
    return COMMITTED if end.error is None else FAILED


@dataclass
class Bracket:
    compaction_id: str
    start: CompactStart
    summary: CompactSummary | None = None
    replacement: UserMessage | None = None
    end: CompactEnd | None = None

    @property
    def outcome(self) -> Outcome:
        return outcome_of(self.end)

    @property
    def imported(self) -> bool:
        """Made by another harness and imported (its start carries the transcript origin)."""
        return self.start.origin is not None

    def add(self, event: SessionEvent) -> None:
        """Record a later member of this bracket (the start itself opens a new bracket)."""
        if isinstance(event, CompactSummary):
            self.summary = event
        elif isinstance(event, UserMessage):
            self.replacement = event
        elif isinstance(event, CompactEnd):
            self.end = event


@dataclass
class BracketFold:
    """One session's brackets by compaction id, folded event by event in seq order."""

    brackets: dict[str, Bracket] = field(default_factory=dict)

    def fold(self, event: SessionEvent) -> Bracket | None:
        """Fold one event; return the bracket it opened or changed (None: not a member)."""
        if isinstance(event, CompactStart):
            opened = self.brackets[event.compaction_id] = Bracket(event.compaction_id, event)
            return opened
        compaction_id = member_of(event)
        bracket = self.brackets.get(compaction_id) if compaction_id else None
        if bracket is not None:
            bracket.add(event)
        return bracket

    def forget(self, compaction_id: str) -> None:
        """Drop a bracket the caller no longer follows (its later members are then ignored)."""
        self.brackets.pop(compaction_id, None)

    @property
    def open(self) -> list[Bracket]:
        """Brackets with no ``compact/end`` yet, in start order."""
        return [b for b in self.brackets.values() if b.end is None]


def find_brackets(events: Iterable[SessionEvent]) -> list[Bracket]:
    """Every bracket of a session's events, in the order of their starts."""
    brackets = BracketFold()
    for event in events:
        brackets.fold(event)
    return list(brackets.brackets.values())


def open_start(session: Session) -> int | None:
    """Seq of the session's open ``compact/start``: the latest start when no end follows it.

    Compactions of one session run one at a time (the lock), so the latest start and end say it
    from the session's indexes, without a fold."""
    start = session.last_of(CompactStart.TYPE)
    end = session.last_of(CompactEnd.TYPE)
    if start is None or (end is not None and end > start):
        return None
    return start


def is_closed(session: Session, start: CompactStart) -> bool:
    """Whether the log holds a ``compact/end`` of ``start``'s compaction after it."""
    last_end = session.last_of(CompactEnd.TYPE)
    if last_end is None or last_end < start.seq:
        return False
    brackets = BracketFold()
    brackets.fold(start)
    for event in session.events(start.seq + 1):
        brackets.fold(event)
    return brackets.brackets[start.compaction_id].end is not None


def committed_count(session: Session) -> int:
    """How many of ``session``'s compactions committed (reads the log only when any ended)."""
    if not session.type_counts.get(CompactEnd.TYPE):
        return 0
    return sum(1 for e in session.events() if isinstance(e, CompactEnd) and outcome_of(e) == COMMITTED)
