"""The ``compact/*`` event types, added to the session registry. All are log-only: they record the
lock (start/end) and the provenance of a summary, and never join the surface. The summary itself rides
on a ``user/message`` replacement whose source is ``Source(kind="plugin", plugin="compact")``.
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

import msgspec

from sessions.blocks import TextBlock
from sessions.events import SessionEvent, Usage, register_event_type


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


class Fidelity(msgspec.Struct, frozen=True, omit_defaults=True):
    """What the fidelity gate measured before commit."""

    sections_present: tuple[str, ...] = ()
    sections_missing: tuple[str, ...] = ()
    identifiers_total: int = 0
    identifiers_kept: int = 0
    retention_ratio: float = 1.0
    missing_identifiers: tuple[str, ...] = ()
    required_ratio: float = 0.0


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


@register_event_type
class CompactEnd(SessionEvent, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = "compact/end"
    compaction_id: str
    turn: int | None
    error: str | None = None


@register_event_type
class CompactPrune(SessionEvent, frozen=True, kw_only=True):
    """Shadow price of the immediately following ``tool/result`` replacement (spec §f)."""

    TYPE: ClassVar[str] = "compact/prune"
    shadowed_range: ShadowedRange
    shadowed_seqs: tuple[int, ...]
    shadowed_token_count: int
    chars_before: int = 0
    chars_after: int = 0
    meter: str = "heuristic"


COMPACT_PLUGIN = "compact"
