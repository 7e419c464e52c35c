"""One session's analysis: what the handover has read of its messages and events, kept with it.

A compaction asks for the same span's facts and identifiers several times (the template
summarizer renders them, the completion checks the summary against them, the fidelity gate counts
them), hashes every shadowed event, and finds most of it already read when the read-ahead
(:mod:`compaction.handover.readahead`) gathered it as the messages arrived. A
:class:`SpanAnalysis` keeps all of that for one session: each message read for the walk
(:func:`~compaction.handover.reading.read`), its identifiers by kind
(:func:`~compaction.handover.identifiers.message_kinds`), each event's
hash, each call's key, parsed arguments and file action, each result's text and outcome, the
cleaned user texts, the last spans' facts and identifiers, and the latest summary's section
bodies and retained identifiers.

Each of those readers is written once, as a plain function of its key, and decorated with
:func:`remembered` (which memo keeps it, and its entries' sizes): without an active analysis the
decorated reader computes; with one, it asks the analysis's memo for it (made on first use, within
the analysis's budget). The analysis knows no reader: the readers name it, never the reverse, so
the handover's modules import each other without a cycle.

Owner and lifetime: the compaction engine's read-ahead
(:class:`~compaction.handover.readahead.ReadAhead`, ``CompactionEngine.read_ahead``) holds one
analysis per session in a ``WeakKeyDictionary``: the analysis holds the session's messages and
events, never the session, so it goes when the session does. A compaction that is not the
engine's (the checkpoint strategy's transaction) gets an analysis of its own, dropped with it.
Nothing of a session is kept by a module (``tests/compaction/test_session_memory.py`` scans every
module for what a dropped session left). After the session adopts a fresher load (new event
objects), what was read of the old ones stays until the analysis starts over or goes.

Bound: every entry is charged an approximate size (:data:`~compaction.sessions.memo.ENTRY_BYTES`
plus the characters of the text it adds: a message's agent text, its identifiers, a call's key,
an event's hash, a span's asks; the messages themselves belong to the session and are not
counted). Past ``max_bytes`` (default :data:`ANALYSIS_BYTES`; ``BasicCompactService(analysis_bytes=)``,
``CompactionEngine(analysis_bytes=)``) the analysis starts over: what it forgot is read again when
asked for, never wrongly recalled.

How the deep functions find it: the engine's transaction (and the read-ahead) make the session's
analysis the active one for the current context (:meth:`SpanAnalysis.active`, a
``contextvars.ContextVar``: each asyncio task has its own, so two sessions compacting in one event
loop never share one), and the readers of the handover (:func:`remembered`) consult
:func:`active_analysis`; without an active analysis they compute without keeping anything. Passing
the analysis as a parameter instead would thread it through the summarizer protocol
(``Summarizer.summarize(request)``), the completion and every helper of the facts walk; the event
hashes, whose call chain is short, are asked of the analysis explicitly
(:meth:`SpanAnalysis.event_hash`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, cast

from compaction.sessions.blocks import ToolCallBlock
from compaction.sessions.events import SessionEvent
from compaction.sessions.hashing import event_hash
from compaction.sessions.memo import ENTRY_BYTES, STRING_BYTES, Budget, IdentityMemo

__all__ = [
    "ANALYSIS_BYTES",
    "Memo",
    "ReadProgress",
    "Remembered",
    "Slot",
    "SpanAnalysis",
    "active_analysis",
    "chars",
    "remembered",
    "text_size",
]

K = TypeVar("K")
T = TypeVar("T")
M = TypeVar("M")
R = TypeVar("R", bound="Memo[Any, Any]")

ANALYSIS_BYTES = 256 << 20
"""Default bound of one session's analysis, approximate bytes. A tool-heavy session's analysis
takes about 1.1 kB a message once read ahead and compacted (the peers benchmark's sessions, counted
here and measured with ``tracemalloc`` within 15%), so this holds about 200,000 messages."""

_ACTIVE: ContextVar[SpanAnalysis | None] = ContextVar("compaction_span_analysis", default=None)


def active_analysis() -> SpanAnalysis | None:
    """The analysis of the session being compacted (or read ahead) in this context, if any."""
    return _ACTIVE.get()


@dataclass
class ReadProgress:
    """How far the read-ahead has read a session: the log length at its last pass (in the session's
    epoch then), and the tool calls still waiting for their result (a call and its result are read
    as a pair, for the files it touched)."""

    epoch: int = -1
    length: int = 0
    waiting: dict[str, tuple[ToolCallBlock, int, int]] = field(default_factory=dict)
    """Each call waiting for its result, by id, with its seq and its index in its message."""


class Slot(Generic[M]):
    """A memo every analysis keeps, made (by ``make``, within the analysis's budget) the first time
    the analysis is asked for it (:meth:`SpanAnalysis.memo`). The slot itself keeps nothing."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[Budget], M]) -> None:
        self.make = make


class SpanAnalysis:
    """What the handover has read of one session, within ``max_bytes`` (approximate)."""

    def __init__(self, max_bytes: int = ANALYSIS_BYTES) -> None:
        self.budget = Budget(max_bytes)
        self.hashes: IdentityMemo[SessionEvent, str] = IdentityMemo(self.budget, HASH_BYTES)
        self.progress = ReadProgress()
        self.memos: dict[Slot[Any], Any] = {}
        """The memos made so far, by slot (:meth:`memo`)."""

    @property
    def max_bytes(self) -> int:
        return self.budget.limit

    @property
    def bytes(self) -> int:
        """The approximate bytes kept now."""
        return self.budget.used

    def memo(self, slot: Slot[M]) -> M:
        """This analysis's memo of ``slot`` (made on first use, charged to this analysis's budget)."""
        memo = self.memos.get(slot)
        if memo is None:
            memo = self.memos[slot] = slot.make(self.budget)
        return memo

    def event_hash(self, event: SessionEvent) -> str:
        """:func:`compaction.sessions.hashing.event_hash`, once per event object."""
        return self.hashes.get(event, event_hash)

    @contextmanager
    def active(self) -> Iterator[SpanAnalysis]:
        """This analysis is the one the handover's readers use, in this context, until the block
        ends (the one active before, if any, is active again after)."""
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)


# ---------------------------------------------------------------- readers written once


class Memo(Protocol[K, T]):
    """What :func:`remembered` needs of a memo (:mod:`compaction.sessions.memo` has the kinds):
    the value of ``key``, computed by ``compute`` when not kept."""

    computed: int

    def get(self, key: K, /, compute: Callable[[K], T]) -> T: ...


class Remembered(Protocol[K, T, R]):
    """A reader of the handover, written once as :attr:`compute` (a function of one key): without
    an active analysis it computes, with one it asks the analysis's memo (:attr:`slot`), which
    computes only what it does not keep. The reader keeps nothing itself. (:attr:`compute` is
    looked up at each call: a test may replace it to count what is computed.)"""

    compute: Callable[[K], T]
    slot: Slot[R]

    def __call__(self, key: K, /) -> T: ...

    def memo(self, analysis: SpanAnalysis, /) -> R:
        """``analysis``'s memo of this reader (to read it in a loop, to keep a value found another
        way, or to count what it computed)."""
        ...


def remembered(memo: Callable[[Budget], R]) -> Callable[[Callable[[K], T]], Remembered[K, T, R]]:
    """The decorator of a reader: ``memo`` makes, for an analysis's budget, the memo that keeps
    its values (an :class:`~compaction.sessions.memo.IdentityMemo` for a value per object, a
    :class:`~compaction.sessions.memo.ValueMemo` per equal key, a
    :class:`~compaction.sessions.memo.SequenceMemo` per message sequence, a
    :class:`~compaction.sessions.memo.LatestOnly` for the latest key). The reader is a plain
    function (a call costs one context lookup and one table lookup more than ``compute``)."""

    def decorate(compute: Callable[[K], T]) -> Remembered[K, T, R]:
        slot: Slot[R] = Slot(memo)

        def reader(key: K) -> T:
            analysis = _ACTIVE.get()
            if analysis is None:
                return holder.compute(key)
            kept = analysis.memos.get(slot)
            if kept is None:
                kept = analysis.memo(slot)
            value: T = kept.get(key, holder.compute)
            return value

        functools.update_wrapper(reader, compute)
        holder = cast("Remembered[K, T, R]", reader)
        holder.compute = compute
        holder.slot = slot
        holder.memo = analysis_memo(slot)  # type: ignore[method-assign]
        return holder

    return decorate


def analysis_memo(slot: Slot[M]) -> Callable[[SpanAnalysis], M]:
    """The memo of ``slot`` in an analysis, as a function of the analysis."""

    def memo_of(analysis: SpanAnalysis) -> M:
        return analysis.memo(slot)

    return memo_of


# ---------------------------------------------------------------- approximate sizes


def chars(texts: Iterator[str] | list[str] | tuple[str, ...]) -> int:
    """The approximate bytes of ``texts``: each one's characters and its string object."""
    return sum(len(text) + STRING_BYTES for text in texts)


HASH_BYTES = ENTRY_BYTES + 64 + STRING_BYTES
"""An event's hash: 64 hexadecimal digits."""


def text_size(key: object, value: str) -> int:
    """An entry whose value is a text."""
    return ENTRY_BYTES + len(value) + STRING_BYTES
