"""The compaction package's event types, added to the session registry when ``compaction`` is
imported: ``compact/*``, and the checkpoint strategy's ``scratchpad/set`` and ``phase/end``. All are
log-only. ``compact/*`` record the lock (start/end) and the provenance of a summary. The summary itself rides
on a ``user/message`` replacement whose source is ``Source(kind="plugin", plugin="compact")``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

import msgspec

from compaction.sessions.blocks import TextBlock
from compaction.sessions.events import SessionEvent, Usage, register_event_type


class Lease(msgspec.Struct, frozen=True):
    """Who holds a compaction lock and until when (recovery decides live or stale from it)."""

    host: str
    pid: int
    expires_at: datetime


class ShadowedRange(msgspec.Struct, frozen=True):
    """Positional surface span: seqs of the first and last shadowed nodes (start may be > end)."""

    start: int
    end: int


@register_event_type
class CompactStart(SessionEvent, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = "compact/start"
    compaction_id: str
    turn: int | None  # None: standalone (manual, between turns); int: owned by that open turn
    lease: Lease
    strategy: str = "summary"
    source_command_id: str | None = None  # the command (``/compact``) that asked for it
    focus: str | None = None  # the user's summarization focus (``/compact <focus>``)


class Fidelity(msgspec.Struct, frozen=True, omit_defaults=True):
    """What the fidelity gate measured before commit."""

    sections_present: tuple[str, ...] = ()
    sections_missing: tuple[str, ...] = ()
    identifiers_total: int = 0
    identifiers_kept: int = 0
    retention_ratio: float = 1.0
    missing_identifiers: tuple[str, ...] = ()
    required_ratio: float = 0.0


class Completion(msgspec.Struct, frozen=True, omit_defaults=True):
    """What the compaction added to the summarizer's text before the gate
    (``compaction.handover.completion``).

    The recorded summary is the summarizer's text, then ``appendix`` when it is not empty (joined by
    a blank line), so the model's own words are the summary minus that suffix. ``draft`` is the
    first answer when a repair request replaced it. ``added_*`` list what the appendix carries;
    ``model_fidelity`` is what the gate would have measured on the summarizer's text alone."""

    mode: str = "appendix"
    appendix: str = ""
    added_identifiers: tuple[str, ...] = ()
    added_user_asks: tuple[str, ...] = ()
    added_open_tasks: tuple[str, ...] = ()
    added_errors: tuple[str, ...] = ()
    added_sections: tuple[str, ...] = ()
    model_fidelity: Fidelity | None = None
    draft: str | None = None
    repair_usage: Usage | None = None
    repair_error: str | None = None
    left_out: str = ""
    """What the appendix's budget left out, counted ("2 error lines, 14 identifiers"): in the log."""
    echoed_sections: tuple[str, ...] = ()
    """Sections whose body the summarizer filled with placeholders or the instruction repeated:
    taken out of its text (the appendix fills them from the span's facts)."""
    echoed_lines: int = 0
    """Placeholder and instruction lines taken out of the summarizer's text."""
    model_empty: bool = False
    """The summarizer's text held nothing of its own (only headings, placeholders, instruction)."""


class DigestRecord(msgspec.Struct, frozen=True, omit_defaults=True):
    """How the summarizer was shown the span: as a digest (``compaction.summarizers.digest``), not
    message by message.

    Enough to rebuild the request sent from the log plus the code: the span's request
    (``compaction.engine.transaction.build_request``), its messages digested by ``digest_span`` under
    ``budget`` tokens as ``meter``'s message price times ``ratio`` counts them, then sent without
    the conversation's system prompt and tools when ``header`` is False. The rest is what the
    digest measured, so an audit can tell its rebuild is the digest that was sent."""

    budget: int
    """The input budget for the messages, in estimated tokens."""
    meter: str
    """The meter (``compaction.engine.meters.meter_named``) whose message price planned the digest."""
    ratio: float = 1.0
    """The factor on that price (the local model's tokenizer against the heuristic: 2.0)."""
    window: int | None = None
    """The summarizer's window (its chunker's; None: it had none). A budget over the room one
    request of it leaves was sent in chunks (``CompactSummary.chunks``)."""
    header: bool = True
    """Whether the conversation's system prompt and tools went with the messages."""
    tokens: int = 0
    """Estimated tokens of the messages shown."""
    source_tokens: int = 0
    """Estimated tokens of the span's messages as they are in the log."""
    messages: int = 0
    """Messages shown, the digest's markers included."""
    source_messages: int = 0
    """Messages of the span (with the protected task statement that leads it)."""
    condensed: int = 0
    """Messages shortened or left out by condensing (tool output, arguments, harness blocks, reasoning)."""
    elided: int = 0
    """Messages of older turns left out whole (each run of them named by a marker)."""
    dropped_asks: int = 0
    """The user's messages of those turns left out too (counted in the markers)."""
    cut: int = 0
    """Messages shown with their long texts cut to head and tail."""


@register_event_type
class CompactSummary(SessionEvent, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = "compact/summary"
    compaction_id: str
    summary: tuple[TextBlock, ...]
    shadowed_range: ShadowedRange
    shadowed_seqs: tuple[int, ...]
    shadowed_token_count: int
    provider: str
    model: str
    max_tokens: int | None = None
    usage: Usage | None = None
    fidelity: Fidelity | None = None
    shadowed_hashes: dict[str, str] = msgspec.field(default_factory=dict)  # str(seq) -> sha256
    meter: str = "heuristic"  # the meter that priced shadowed_token_count
    summary_token_count: int = 0  # the framed replacement's price under the same meter
    chunks: int = 1  # >1 when the span was summarized in chunks and merged
    request_model: str | None = None  # the model the request named (``model`` is the one that answered)
    completion: Completion | None = None  # None: recorded before completion existed, or mode "off"
    digest: DigestRecord | None = None  # None: every message was sent (or recorded before digests)
    source_command_id: str | None = None
    header_sent: bool = True
    """False: the summarizer was sent the messages without the conversation's system prompt and
    tools (a chunker with ``keep_header=False``, as the local model's). Logs written before this
    field read True."""


@register_event_type
class CompactEnd(SessionEvent, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = "compact/end"
    compaction_id: str
    turn: int | None
    error: str | None = None
    source_command_id: str | None = None


@register_event_type
class CompactPrune(SessionEvent, frozen=True, kw_only=True):
    """Shadow price of the immediately following ``tool/result`` replacement (pruning)."""

    TYPE: ClassVar[str] = "compact/prune"
    shadowed_range: ShadowedRange
    shadowed_seqs: tuple[int, ...]
    shadowed_token_count: int
    chars_before: int = 0
    chars_after: int = 0
    meter: str = "heuristic"


COMPACT_PLUGIN = "compact"


# ---------------------------------------------------------------- the checkpoint strategy


@register_event_type
class ScratchpadSet(SessionEvent, frozen=True, kw_only=True):
    """A typed state value and what produced it (``tool:<call id>`` or ``seq:<n>``; empty = model)."""

    TYPE: ClassVar[str] = "scratchpad/set"
    key: str
    value: Any
    source: str = ""


@register_event_type
class PhaseEnd(SessionEvent, frozen=True, kw_only=True):
    """A phase's one-paragraph conclusion, written by the phase that ends (a boundary)."""

    TYPE: ClassVar[str] = "phase/end"
    name: str
    conclusion: str
