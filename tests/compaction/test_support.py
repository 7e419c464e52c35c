"""Shared helpers of the compaction tests (this module holds no tests).

Scripted summarizers (fixed texts, the template recording its requests, an awaited gate), an
eight-section summary builder, sessions of known prices, and the invariant checks every committed
compaction must pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable

from compaction.engine.meters import HeuristicMeter, Meter
from compaction.sessions import render
from compaction.sessions.blocks import Message
from compaction.sessions.events import UserMessage
from compaction.sessions.session import Session, project
from compaction.summarizers.template import TemplateSummarizer
from compaction.vocabulary.checkpoint import is_checkpoint
from compaction.vocabulary.contract import CompactionResult
from compaction.vocabulary.events import CompactEnd, CompactStart, CompactSummary
from compaction.vocabulary.instruction import SECTIONS
from compaction.vocabulary.summarizer import Summarizer, SummaryOutput, SummaryRequest

OnSummarize = Callable[[SummaryRequest], Awaitable[None] | None]


def sectioned(*facts: str, **sections: str) -> str:
    """An eight-section summary: ``facts`` go under Critical Context; keyword args fill sections
    by name with underscores for spaces (``Files_and_Code="- a.py"``)."""
    bodies = {name.replace(" ", "_"): "- (none)" for name in SECTIONS}
    bodies.update(sections)
    if facts:
        bodies["Critical_Context"] = "\n".join(f"- {fact}" for fact in facts)
    return "\n\n".join(f"## {name}\n{bodies[name.replace(' ', '_')]}" for name in SECTIONS)


class ScriptedSummarizer(Summarizer):
    """Returns ``texts`` in order (the last one repeats), records every request, and runs
    ``on_summarize`` (sync or async) before answering: tests change the session there, or wait."""

    provider = "scripted"
    model = "scripted-summary"

    def __init__(self, *texts: str, on_summarize: OnSummarize | None = None) -> None:
        self.texts = list(texts) or [sectioned()]
        self.on_summarize = on_summarize
        self.requests: list[SummaryRequest] = []

    async def summarize(self, request: SummaryRequest) -> SummaryOutput:
        self.requests.append(request)
        if self.on_summarize is not None:
            waited = self.on_summarize(request)
            if waited is not None:
                await waited
        text = self.texts.pop(0) if len(self.texts) > 1 else self.texts[0]
        return SummaryOutput(
            text=text, provider=self.provider, model=self.model, max_tokens=request.max_tokens
        )


class RecordingTemplateSummarizer(TemplateSummarizer):
    """The template summarizer, keeping every request it received."""

    def __init__(self) -> None:
        self.requests: list[SummaryRequest] = []

    async def summarize(self, request: SummaryRequest) -> SummaryOutput:
        self.requests.append(request)
        return await super().summarize(request)


class FailingSummarizer(Summarizer):
    def __init__(self, error: Exception) -> None:
        self.error = error

    async def summarize(self, request: SummaryRequest) -> SummaryOutput:
        raise self.error


class GatedSummarizer(Summarizer):
    """Blocks in ``summarize`` until ``release`` is set; ``entered`` is set on entry."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def summarize(self, request: SummaryRequest) -> SummaryOutput:
        self.entered.set()
        await self.release.wait()
        return SummaryOutput(text=self.text, provider="gated", model="gated-1")


# ---------------------------------------------------------------- sessions of known prices


def text_of_price(tokens: int, fill: str = "x") -> str:
    """A text whose user/message prices exactly ``tokens`` under the 4-chars heuristic
    (ceil(len/4) + 4 block + 4 role)."""
    assert tokens > 8, "a one-block message costs at least 9"
    return fill * ((tokens - 8) * 4)


# ---------------------------------------------------------------- what every compaction keeps


def surface_snapshot(session: Session) -> tuple[tuple[int, ...], int, list[Message]]:
    return tuple(session.nodes), session.surface.generation, session.derive_messages()


def checkpoints_on_surface(session: Session) -> list[int]:
    found = []
    for seq in session.nodes:
        message = project(session.event(seq))
        if message is not None and is_checkpoint(message):
            found.append(seq)
    return found


def bracket(session: Session, result: CompactionResult) -> tuple[CompactStart, CompactSummary, CompactEnd]:
    start = session.event(result.start_seq)
    summary = session.event(result.summary_seq)
    end = session.event(result.end_seq)
    assert isinstance(start, CompactStart)
    assert isinstance(summary, CompactSummary)
    assert isinstance(end, CompactEnd)
    return start, summary, end


def assert_committed(session: Session, result: CompactionResult, first_user: Message | None) -> None:
    """The invariants of one committed compaction (docs/architecture.md, "The compaction transaction")."""
    start, summary, end = bracket(session, result)
    assert start.compaction_id == summary.compaction_id == end.compaction_id == result.compaction_id
    assert end.error is None
    assert result.start_seq < result.summary_seq < result.replacement_seq < result.end_seq
    replacement = session.event(result.replacement_seq)
    assert isinstance(replacement, UserMessage)
    cited = replacement.source_event_seqs or ()
    assert cited[:2] == (result.start_seq, result.summary_seq)
    assert set(result.shadowed_seqs) <= set(cited), "every shadowed seq is cited"
    assert not set(result.shadowed_seqs) & set(session.nodes), "shadowed nodes left the surface"
    assert result.replacement_seq in session.nodes
    assert session.surface.is_balanced(), "the surface is tool-pairing balanced"
    assert render.pairing_problems(session.derive_messages()) == []
    if first_user is not None:
        assert session.first_user_seq in session.nodes
        assert first_user in session.derive_messages(), "the task statement is kept verbatim"


def committed_brackets(session: Session) -> int:
    return sum(1 for e in session.events() if isinstance(e, CompactEnd) and e.error is None)


def prices(session: Session, seqs: Iterable[int], meter: Meter | None = None) -> int:
    meter = meter or HeuristicMeter()
    return sum(meter.node_price(session, seq) for seq in seqs)
