"""Which span to compact: the retention walk from the tail, snapped head-ward to a tool-pairing
balanced cut, with the session's first user message kept structurally.

A *unit* is what snapping makes indivisible: a closed step (an assistant message with calls and all
its results) or one standalone message. An open step cannot be split, so selection declines until it
closes; a surface of one unit cannot be compacted.
"""

from __future__ import annotations

from array import array
from collections.abc import Collection

from compaction.engine.meters import Meter
from compaction.errors import SpanError
from compaction.sessions.session import Session


class Span:
    """Positions ``first``..``last`` (inclusive) on the surface and their seqs.

    A span selected by :func:`select_span` is the range alone until its seqs are asked for (a
    decision that compacts nothing copies nothing); they are read from the surface then, which
    must not have been replaced or rolled back since the selection (appends are fine)."""

    __slots__ = ("_epoch", "_generation", "_seqs", "_session", "first", "last")

    def __init__(
        self,
        first: int,
        last: int,
        seqs: tuple[int, ...] | None = None,
        *,
        session: Session | None = None,
    ) -> None:
        if seqs is None and session is None:
            raise ValueError("Span needs its seqs or the session it was selected on")
        self.first = first
        self.last = last
        self._seqs = seqs
        self._session = session
        self._epoch = session.epoch if session is not None else 0
        self._generation = session.surface.generation if session is not None else 0

    @property
    def seqs(self) -> tuple[int, ...]:
        if self._seqs is None:
            self._seqs = tuple(self._nodes()[self.first : self.last + 1])
            self._session = None
        return self._seqs

    @property
    def start(self) -> int:
        return self._seqs[0] if self._seqs is not None else self._nodes()[self.first]

    @property
    def end(self) -> int:
        return self._seqs[-1] if self._seqs is not None else self._nodes()[self.last]

    def __len__(self) -> int:
        return self.last - self.first + 1

    def _nodes(self) -> array[int]:
        session = self._session
        assert session is not None
        if session.epoch != self._epoch or session.surface.generation != self._generation:
            raise SpanError(
                f"span at surface positions {self.first}..{self.last} of session {session.id}: the "
                "surface was replaced or rolled back since the span was selected; select it again"
            )
        return session.nodes

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Span):
            return NotImplemented
        return (self.first, self.last, self.seqs) == (other.first, other.last, other.seqs)

    def __hash__(self) -> int:
        return hash((self.first, self.last, self.seqs))

    def __repr__(self) -> str:
        return f"Span(first={self.first}, last={self.last}, seqs={self.seqs!r})"


def protected_position(session: Session, keep_first_user: bool) -> int | None:
    """Surface position of the first user message when it must not be shadowed."""
    if not keep_first_user or session.first_user_seq is None:
        return None
    return session.surface.position(session.first_user_seq)


def leading_task_statement(session: Session, shadowed: Collection[int]) -> int | None:
    """Seq of the first user message when it is on the surface and not in ``shadowed``: the
    summarization request then leads with it, so the summarizer still sees the task."""
    first = session.first_user_seq
    if first is None or first in shadowed or first not in session.surface:
        return None
    return first


def select_span(
    session: Session, meter: Meter, retain_tokens: int, *, keep_first_user: bool = True
) -> Span | None:
    """The oldest whole units beyond ``retain_tokens`` of retained tail, or None."""
    nodes = session.nodes
    if not nodes:
        return None
    surface = session.surface
    keep = _retention_index(session, meter, retain_tokens)
    while keep > 0 and not surface.balanced_at(keep):
        keep -= 1
    protected = protected_position(session, keep_first_user)
    if protected is None or protected >= keep:
        first, last = 0, keep - 1  # no task statement to keep, or it is in the retained tail
    elif protected + 1 < keep and surface.balanced_at(protected + 1):
        first, last = protected + 1, keep - 1  # anchored right after the task statement
    else:
        first, last = 0, protected - 1  # only what precedes the task statement
        if last >= first and not surface.balanced_at(last + 1):
            return None
    if last < first:
        return None
    return Span(first, last, session=session)


def head_before_task(session: Session, *, keep_first_user: bool = True) -> Span | None:
    """Everything on the surface before the kept task statement, when that is a balanced span."""
    protected = protected_position(session, keep_first_user)
    if not protected:
        return None
    nodes = session.nodes
    if not session.surface.balanced_at(protected):
        return None
    return Span(0, protected - 1, tuple(nodes[:protected]))


def _retention_index(session: Session, meter: Meter, retain_tokens: int) -> int:
    """The first position of the retained tail: walked from the newest node back over the
    meter's prices in surface order (O(tail))."""
    column = meter.price_column(session)
    accumulated = 0
    keep = len(column)
    for index in range(len(column) - 1, -1, -1):
        accumulated += column[index]
        keep = index
        if accumulated >= retain_tokens:
            break
    return keep


def span_for(session: Session, start: int, end: int, *, keep_first_user: bool = True) -> Span:
    """Validate an explicit region (both ends on the surface, in order, both edges balanced) and
    return it."""
    surface = session.surface
    first = surface.position(start)
    if first is None:
        raise SpanError(f"compactRegion: start seq {start} not found in surface (session {session.id})")
    last = surface.position(end)
    if last is None:
        raise SpanError(f"compactRegion: end seq {end} not found in surface (session {session.id})")
    if first > last:
        raise SpanError(
            f"compactRegion: start seq {start} (position {first}) is after end seq {end} "
            f"(position {last}) on the surface"
        )
    if not surface.balanced_before(start):
        raise SpanError(
            f"compactRegion: start seq {start} is not a balanced boundary (would split a step's "
            "tool-call/result pair)"
        )
    if not surface.balanced_after(end):
        raise SpanError(
            f"compactRegion: end seq {end} is not a balanced boundary (would split a step, or the "
            "step is still open)"
        )
    protected = protected_position(session, keep_first_user)
    if protected is not None and first <= protected <= last:
        raise SpanError(
            f"compactRegion: the span {start}..{end} includes the session's first user message "
            f"(seq {session.first_user_seq}), which is kept structurally; start after it or set "
            "keep_first_user_message=False"
        )
    return Span(first, last, tuple(session.nodes[first : last + 1]))
