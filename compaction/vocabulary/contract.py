"""The compaction seam: what a compaction backend promises, not how it does it.

A :class:`CompactService` decides when and what to compact and commits the result as events. Backends
(:class:`~compaction.service.BasicCompactService`, the checkpoint strategy) implement every method.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Literal

from compaction.sessions.blocks import TextBlock
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from compaction.vocabulary.events import ShadowedRange

Trigger = Literal["pressure", "context-overflow"]


@dataclass(frozen=True)
class CompactionResult:
    """What a committed compaction returns: its events, the summary and what it shadowed."""

    compaction_id: str
    start_seq: int
    summary_seq: int
    replacement_seq: int
    end_seq: int
    summary: tuple[TextBlock, ...]
    shadowed_range: ShadowedRange
    shadowed_seqs: tuple[int, ...]  # in surface order
    shadowed_token_count: int
    summary_token_count: int

    def describe(self) -> str:
        return (
            f"shadowed {len(self.shadowed_seqs)} surface nodes (seqs {self.shadowed_range.start}-"
            f"{self.shadowed_range.end}, ~{self.shadowed_token_count} tokens) with a "
            f"{self.summary_token_count}-token checkpoint"
        )


FitStatus = Literal["under_threshold", "above_threshold", "above_window"]
"""Where a session's request total ended, against ``threshold_ratio x window`` and the window."""

ShortfallReason = Literal["fixed_overhead", "unsplittable_unit", "retained_tail", "attempt_failed"]
"""Why a session stays above its threshold: the overhead alone reaches it; what is left on the
surface cannot be compacted (the task statement, a checkpoint, the newest unit); the tail kept
verbatim by an explicit ``retain_tokens``; or a further attempt failed after others committed."""


@dataclass(frozen=True)
class Shortfall:
    """Why compaction stopped above the threshold, with what the cause weighs."""

    reason: ShortfallReason
    message: str
    tokens: int  # what the cause weighs in the request total (the overhead, the unit, the tail)
    seqs: tuple[int, ...] = ()  # the surface nodes it names, if any


@dataclass(frozen=True)
class FitReport:
    """What compacting a session to its threshold achieved (:meth:`BasicCompactService.compact_to_fit
    <compaction.service.BasicCompactService.compact_to_fit>`): the compactions that committed, even when
    a later attempt failed (``failure``), and where the request total ended."""

    compactions: tuple[CompactionResult, ...]
    window: int
    threshold: int
    tokens_before: int
    tokens_after: int
    overhead_tokens: int
    ratio: float
    status: FitStatus
    shortfall: Shortfall | None = None
    failure: Exception | None = None

    @property
    def fits(self) -> bool:
        """The request total is below the context window."""
        return self.status != "above_window"


class CompactService(ABC):
    """Abstract compaction capability over one session at a time."""

    @abstractmethod
    async def compact_if_needed(
        self, session: Session, *, store: SessionStore | None = None, trigger: Trigger = "pressure"
    ) -> CompactionResult | None:
        """Check token pressure; compact the oldest whole units when over the threshold."""

    @abstractmethod
    async def compact_region(
        self,
        session: Session,
        start: int,
        end: int,
        *,
        store: SessionStore | None = None,
        manual: bool = False,
    ) -> CompactionResult:
        """Summarize the surface nodes ``start``..``end`` (positional, inclusive) into one node."""

    @abstractmethod
    async def compact_now(
        self,
        session: Session,
        *,
        store: SessionStore | None = None,
        source_command_id: str | None = None,
        focus: str | None = None,
    ) -> CompactionResult | None:
        """Manual compaction between turns: everything but the newest unit (None when nothing).

        ``source_command_id``: the command that asked (``/compact``), carried by every record of
        the compaction; ``focus``: the user's summarization focus, added to the instruction."""
