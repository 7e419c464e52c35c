"""Tool-result pruning: the cheapest compaction operation, model-free (docs/operations.md).

An oversized tool result keeps its head and tail around a marker. Each rewrite is a ``compact/prune``
record (the shadow price of the original node, under the session's meter) immediately followed by a
``tool/result`` replacement of exactly that node: same message id, call id, error flag and every other
field; only the text content changes. Both land in one atomic save. A second pass finds nothing.
Lengths count Unicode code points of text blocks only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from compaction.engine.meters import Meter
from compaction.errors import CompactionConfigError, CompactionError
from compaction.sessions.blocks import Message, ResultPart, TextBlock, ToolResultBlock
from compaction.sessions.events import UNSET_SEQ, UNSET_TIME, Replace, ToolResult
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from compaction.vocabulary.events import CompactPrune, ShadowedRange

MARKER = "\n\n[... tool result middle pruned ...]\n\n"
NAME = "ToolResultPruneConfig"


@dataclass(frozen=True)
class PruneConfig:
    threshold_chars: int = 8192
    head_chars: int = 4096
    tail_chars: int = 1024

    def __post_init__(self) -> None:
        if not _is_int(self.threshold_chars) or self.threshold_chars <= 0:
            raise CompactionConfigError(
                f"{NAME}: thresholdChars ({self.threshold_chars!r}) must be a positive integer"
            )
        for name, value in (("headChars", self.head_chars), ("tailChars", self.tail_chars)):
            if not _is_int(value) or value < 0:
                raise CompactionConfigError(f"{NAME}: {name} ({value!r}) must be a non-negative integer")
        total = self.head_chars + len(MARKER) + self.tail_chars
        if total > self.threshold_chars:
            raise CompactionConfigError(
                f"{NAME}: headChars + marker + tailChars ({total}) must be at most thresholdChars "
                f"({self.threshold_chars})"
            )

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> PruneConfig:
        aliases = {
            "thresholdChars": "threshold_chars",
            "headChars": "head_chars",
            "tailChars": "tail_chars",
            "threshold_chars": "threshold_chars",
            "head_chars": "head_chars",
            "tail_chars": "tail_chars",
        }
        unknown = [k for k in values if k not in aliases]
        if unknown:
            raise CompactionConfigError(
                f'{NAME}: unknown key "{unknown[0]}" (allowed: thresholdChars, headChars, tailChars)'
            )
        return cls(**{aliases[k]: v for k, v in values.items()})


@dataclass(frozen=True)
class Pruned:
    original_seq: int
    replacement_seq: int
    call_id: str
    chars_before: int
    chars_after: int


@dataclass
class PruneReport:
    pruned: list[Pruned] = field(default_factory=list)

    @property
    def chars_removed(self) -> int:
        return sum(p.chars_before - p.chars_after for p in self.pruned)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def prune_content(blocks: tuple[ResultPart, ...], config: PruneConfig) -> tuple[ResultPart, ...] | None:
    """The pruned content, or None when its text fits ``threshold_chars``."""
    total = sum(len(b.text) for b in blocks if isinstance(b, TextBlock))
    if total <= config.threshold_chars:
        return None
    cut_from, cut_to = config.head_chars, total - config.tail_chars
    result: list[ResultPart] = []
    offset = 0
    marked = False
    for block in blocks:
        if not isinstance(block, TextBlock):
            result.append(block)
            continue
        begin, end = offset, offset + len(block.text)
        offset = end
        head = block.text[: _clamp(cut_from - begin, len(block.text))]
        tail = block.text[_clamp(cut_to - begin, len(block.text)) :]
        marker = ""
        if not marked and begin < cut_to and end > cut_from:
            marker, marked = MARKER, True
        text = head + marker + tail
        if text:
            result.append(msgspec.structs.replace(block, text=text))
    kept = sum(len(b.text) for b in result if isinstance(b, TextBlock))
    if not marked:
        raise CompactionError("tool-result prune: failed to locate the removed text span")
    if kept > config.threshold_chars or kept >= total:
        raise CompactionError("tool-result prune: replacement must be smaller and within threshold")
    return tuple(result)


def _clamp(value: int, upper: int) -> int:
    return max(0, min(value, upper))


def prune_session(
    session: Session,
    meter: Meter,
    config: PruneConfig | None = None,
    *,
    store: SessionStore | None = None,
) -> PruneReport:
    """Prune every oversized tool result on the surface, in surface order."""
    config = config or PruneConfig()
    report = PruneReport()
    for seq in list(session.nodes):
        original = session.event(seq)
        if not isinstance(original, ToolResult) or not original.message.content:
            continue
        block = original.message.content[0]
        if not isinstance(block, ToolResultBlock):
            continue
        content = prune_content(block.content, config)
        if content is None:
            continue
        report.pruned.append(_rewrite(session, meter, original, content, store=store))
    return report


def _rewrite(
    session: Session,
    meter: Meter,
    original: ToolResult,
    content: tuple[ResultPart, ...],
    *,
    store: SessionStore | None,
) -> Pruned:
    seq = original.seq
    block = original.message.content[0]
    assert isinstance(block, ToolResultBlock)
    new_block = msgspec.structs.replace(block, content=content)
    message: Message = msgspec.structs.replace(
        original.message, content=(new_block, *original.message.content[1:])
    )
    before = sum(len(b.text) for b in block.content if isinstance(b, TextBlock))
    after = sum(len(b.text) for b in content if isinstance(b, TextBlock))
    record = CompactPrune(
        shadowed_range=ShadowedRange(seq, seq),
        shadowed_seqs=(seq,),
        shadowed_token_count=meter.node_price(session, seq),
        chars_before=before,
        chars_after=after,
        meter=meter.name,
    )
    replacement = msgspec.structs.replace(
        original,
        seq=UNSET_SEQ,
        time=UNSET_TIME,
        message=message,
        surface_op=Replace(seq, seq),
        source_event_seqs=(seq,),
        origin=None,
    )
    mark = session.mark()
    _, stored = session.append_all([record, replacement])
    if store is not None:
        try:
            store.save(session)
        except Exception:
            session.rollback(mark)
            raise
    return Pruned(seq, stored.seq, block.tool_call_id, before, after)
