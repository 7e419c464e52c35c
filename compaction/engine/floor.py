"""The smallest checkpoint a span could be replaced with, and a span too small to gain anything.

A checkpoint is its summary in a frame (the preamble and the tags), and the fidelity gate, when it
requires the eight sections, needs each heading. A span whose tokens are not above that floor
cannot be replaced by anything smaller: the shrink check would refuse every summary. Such a span is
declined before ``compact/start`` is written and before any summarizer (a paid model) is asked,
with :class:`~compaction.errors.SpanTooSmallError`.

The floor is a lower bound (the headings without their bodies, no identifier counted), so a span
that some summary could shrink is never declined.
"""

from __future__ import annotations

from compaction.engine.meters import Meter
from compaction.engine.selection import Span
from compaction.errors import SpanTooSmallError
from compaction.sessions.blocks import TextBlock
from compaction.sessions.session import Session
from compaction.vocabulary.checkpoint import checkpoint_message, new_compaction_id
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.instruction import SECTIONS


def checkpoint_floor(meter: Meter, config: BasicConfig, source_command_id: str | None = None) -> int:
    """The framed tokens of the smallest checkpoint the gate could pass under ``config``: the
    frame, and with ``require_sections`` each section's heading."""
    text = "\n".join(f"## {section}" for section in SECTIONS) if config.require_sections else ""
    message = checkpoint_message(new_compaction_id(), (TextBlock(text),), source_command_id)
    return meter.message(message)


def refuse_too_small(
    session: Session,
    span: Span,
    meter: Meter,
    config: BasicConfig,
    source_command_id: str | None = None,
) -> None:
    """Raise :class:`SpanTooSmallError` when no checkpoint could be smaller than ``span``."""
    prices = meter.prices_for(session, span.seqs)
    span_tokens = sum(prices[seq] for seq in span.seqs)
    floor = checkpoint_floor(meter, config, source_command_id)
    if span_tokens > floor:
        return
    gate = " and the eight section headings the fidelity gate requires" if config.require_sections else ""
    raise SpanTooSmallError(
        f"compaction declined: the span of session {session.id} (seqs {span.start}..{span.end}, "
        f"{len(span.seqs)} nodes) holds {span_tokens} estimated tokens, and the smallest checkpoint "
        f"that could replace it (the frame{gate}) takes {floor}: nothing to gain, so nothing was "
        "written and no summarizer was asked. Compact a longer span, or let the session grow.",
        span_tokens=span_tokens,
        floor_tokens=floor,
    )
