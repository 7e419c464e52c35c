"""One session's analysis: what the handover has read of its messages and events, kept with it.

A compaction asks for the same span's facts and identifiers several times (the template
summarizer renders them, the completion checks the summary against them, the fidelity gate counts
them), hashes every shadowed event, and finds most of it already read when the read-ahead
(:mod:`compaction.handover.readahead`) gathered it as the messages arrived. A
:class:`SpanAnalysis` keeps all of that for one session: each message read for the walk
(:func:`~compaction.handover.facts.read`), its identifiers by kind
(:func:`~compaction.handover.identifiers.message_kinds`), each event's
hash, each call's key, parsed arguments and file action, each result's text and outcome, the
cleaned user texts, the last spans' facts and identifiers, and the latest summary's section
bodies and retained identifiers.

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
loop never share one), and the free functions of :mod:`~compaction.handover.facts`,
:mod:`~compaction.handover.identifiers` and :mod:`~compaction.handover.fidelity` consult
:func:`active_analysis`; without an active analysis they compute without keeping anything. Passing
the analysis as a parameter instead would thread it through the summarizer protocol
(``Summarizer.summarize(request)``), the completion and every helper of the facts walk; the event
hashes, whose call chain is short, are asked of the analysis explicitly
(:meth:`SpanAnalysis.event_hash`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from compaction.sessions.blocks import Message, ToolCallBlock, ToolResultBlock
from compaction.sessions.events import SessionEvent
from compaction.sessions.hashing import event_hash
from compaction.sessions.memo import (
    ENTRY_BYTES,
    STRING_BYTES,
    Budget,
    IdentityMemo,
    LatestOnly,
    SequenceMemo,
    ValueMemo,
)

if TYPE_CHECKING:
    from compaction.handover.carried import FileRecord
    from compaction.handover.facts import Read, SpanFacts, UserText
    from compaction.handover.identifiers import Identifiers, Kinds

__all__ = ["ANALYSIS_BYTES", "ReadProgress", "SpanAnalysis", "active_analysis"]

FileAction = tuple[str, tuple[str, ...]]
"""What a call and its result did to files: ``(kind, paths)``
(:func:`~compaction.handover.facts.file_action`)."""

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


class SpanAnalysis:
    """What the handover has read of one session, within ``max_bytes`` (approximate)."""

    def __init__(self, max_bytes: int = ANALYSIS_BYTES) -> None:
        self.budget = Budget(max_bytes)
        budget = self.budget
        self.reads: IdentityMemo[Message, Read] = IdentityMemo(budget, _read_size)
        self.kinds: IdentityMemo[Message, Kinds] = IdentityMemo(budget, _kinds_size)
        self.hashes: IdentityMemo[SessionEvent, str] = IdentityMemo(budget, HASH_BYTES)
        self.arguments: ValueMemo[str, object] = ValueMemo(budget, _arguments_size)
        self.call_keys: IdentityMemo[ToolCallBlock, str] = IdentityMemo(budget, _text_size)
        self.result_texts: IdentityMemo[ToolResultBlock, str] = IdentityMemo(budget, _result_size)
        self.failures: IdentityMemo[ToolResultBlock, bool] = IdentityMemo(budget, ENTRY_BYTES)
        self.first_lines: ValueMemo[str, str] = ValueMemo(budget, _text_size)
        self.user_texts: ValueMemo[str, UserText] = ValueMemo(budget, _user_text_size)
        self.needles: ValueMemo[str, str] = ValueMemo(budget, _text_size)
        self.file_actions: IdentityMemo[ToolResultBlock, tuple[ToolCallBlock, FileAction]] = IdentityMemo(
            budget, _file_action_size
        )
        """Each result's file action, with the call it was paired with (by identity: a result
        paired with another call is read again)."""
        self.spans: SequenceMemo[SpanFacts] = SequenceMemo(budget, _facts_size)
        self.unions: SequenceMemo[Identifiers] = SequenceMemo(budget, _identifiers_size)
        self.found_in: LatestOnly[str, dict[str, bool]] = LatestOnly(budget, _summary_size)
        self.bodies: LatestOnly[str, dict[str, str]] = LatestOnly(budget, _bodies_size)
        self.digests: ValueMemo[int, bytes] = ValueMemo(budget, _digest_size)
        """Each message event's sha256 digest by seq, and each message's results' file actions by
        its seq, as the snapshot carries them (:mod:`compaction.handover.carried`; seqs of the
        session's epoch in :attr:`progress`)."""
        self.files: ValueMemo[int, tuple[FileRecord, ...]] = ValueMemo(budget, _files_size)
        self.progress = ReadProgress()

    @property
    def max_bytes(self) -> int:
        return self.budget.limit

    @property
    def bytes(self) -> int:
        """The approximate bytes kept now."""
        return self.budget.used

    def event_hash(self, event: SessionEvent) -> str:
        """:func:`compaction.sessions.hashing.event_hash`, once per event object."""
        return self.hashes.get(event, event_hash)

    @contextmanager
    def active(self) -> Iterator[SpanAnalysis]:
        """This analysis is the one the handover's free functions use, in this context, until the
        block ends (the one active before, if any, is active again after)."""
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)


# ---------------------------------------------------------------- approximate sizes


def _chars(texts: Iterator[str] | list[str] | tuple[str, ...]) -> int:
    return sum(len(text) + STRING_BYTES for text in texts)


HASH_BYTES = ENTRY_BYTES + 64 + STRING_BYTES
"""An event's hash: 64 hexadecimal digits."""


def _text_size(key: object, value: str) -> int:
    return ENTRY_BYTES + len(value) + STRING_BYTES


def _arguments_size(key: str, value: object) -> int:
    """A parsed JSON value: about twice its text in objects."""
    return ENTRY_BYTES + 2 * len(key)


def _result_size(block: ToolResultBlock, value: str) -> int:
    """A result's text: nothing more when it is its one text block's own string."""
    for inner in block.content:
        if getattr(inner, "text", None) is value:
            return ENTRY_BYTES
    return ENTRY_BYTES + len(value) + STRING_BYTES


def _read_size(message: Message, value: Read) -> int:
    """A message read: its text (often the message's own string, counted anyway) and its items."""
    return ENTRY_BYTES + len(value.text) + STRING_BYTES + 64 * len(value.items)


IDENTIFIER_BYTES = 128
"""One identifier of a message, approximately: its string (most are paths and commands of a few dozen
characters) and its table slot (counted, not measured: a message's identifiers are many and short)."""


def _kinds_size(message: Message, value: Kinds) -> int:
    paths, commands, errors, lines, ids = value
    return ENTRY_BYTES + IDENTIFIER_BYTES * (len(paths) + len(commands) + len(errors) + len(lines) + len(ids))


def _digest_size(seq: int, value: bytes) -> int:
    return ENTRY_BYTES + len(value) + STRING_BYTES


def _files_size(seq: int, value: tuple[FileRecord, ...]) -> int:
    return ENTRY_BYTES + sum(ENTRY_BYTES + len(found.kind) + _chars(found.paths) for found in value)


def _user_text_size(text: str, value: UserText) -> int:
    return ENTRY_BYTES + len(value.ask) + STRING_BYTES + _chars(value.slash_commands)


def _file_action_size(key: object, value: tuple[ToolCallBlock, FileAction]) -> int:
    paths = value[1][1]
    return ENTRY_BYTES + (_chars(paths) if paths else 0)


def _identifiers_size(value: Identifiers) -> int:
    """A union of identifiers: new tables of strings the messages' own tables hold too."""
    groups = (value.paths, value.commands, value.errors, value.error_lines, value.ids)
    return sum(ENTRY_BYTES + 16 * len(group) for group in groups)


def _facts_size(value: SpanFacts) -> int:
    texts = (*value.user_asks, *value.open_tasks, *value.last_steps, *value.unanswered)
    return (
        _identifiers_size(value.identifiers)
        + _chars(texts)
        + sum(ENTRY_BYTES + len(e.first_line) + len(e.command) for e in value.errors)
    )


def _summary_size(summary: str, value: dict[str, bool]) -> int:
    """The latest summary searched (what is looked for in it are the span's identifiers, counted
    with the messages they came from)."""
    return ENTRY_BYTES + len(summary) + STRING_BYTES


def _bodies_size(summary: str, value: dict[str, str]) -> int:
    return ENTRY_BYTES + len(summary) + STRING_BYTES + _chars(list(value.values()))
