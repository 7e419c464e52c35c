"""The summarizer seam: one request shape in, one output shape out.

A summarizer gets the conversation's own system prompt and tools (for prefix-cache alignment), the
shadowed messages as structured messages, and the single instruction; it returns text plus the
provenance the log records (provider, model as reported, max_tokens, usage, and the digest when
the span was sent as one, so the audit rebuilds what the model was shown). Cancellation is task
cancellation: a summarizer must close its I/O promptly when its task is cancelled.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Self

import msgspec

from compaction.sessions.blocks import Message
from compaction.sessions.events import ToolSpec, Usage
from compaction.vocabulary.events import DigestRecord


class SummaryRequest(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str
    compaction_id: str
    system: str | None
    tools: tuple[ToolSpec, ...]
    messages: tuple[Message, ...]  # the shadowed span, in surface order
    instruction: str
    max_tokens: int


class SummaryOutput(msgspec.Struct, frozen=True, kw_only=True):
    text: str
    provider: str
    model: str
    max_tokens: int | None = None
    usage: Usage | None = None
    chunks: int = 1
    digest: DigestRecord | None = None
    """How the span was digested (:mod:`~compaction.summarizers.digest`); None: sent whole."""
    header: bool = True
    """Whether the conversation's system prompt and tools were sent with the messages."""


class Summarizer(ABC):
    """Turns a :class:`SummaryRequest` into a :class:`SummaryOutput` or raises SummarizerError."""

    provider: str = "unknown"
    model: str = "unknown"

    @abstractmethod
    async def summarize(self, request: SummaryRequest) -> SummaryOutput:
        """Summarize; raise a :class:`~compaction.errors.SummarizerError` on failure."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections (model-backed summarizers)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
