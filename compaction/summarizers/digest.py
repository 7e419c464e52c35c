"""A per-compaction model-input budget: the span sent as a digest that fits it.

Map-reduce chunking (:mod:`~compaction.summarizers.chunking`) sends the whole span, so its cost
grows with the span: compacting the public transcripts through the embedded SmolLM2 took 40 to 80
CPU minutes on 2 cores. :class:`DigestSummarizer` bounds it by design: the summarizer is shown a
digest of the span of at most ``budget`` estimated tokens, in one request (or a few, when the
budget is larger than the window and a :class:`~compaction.summarizers.chunking.ChunkingSummarizer`
underneath splits it). :func:`digest_span` builds it in four steps, each only while the digest is
still over the budget:

1. condense: tool results (and, in harnesses without tool calls, the observations answering the
   agent's fenced commands) cut to their first :data:`HEAD_LINES` and last :data:`TAIL_LINES`
   lines, each line clipped, a failed one keeping its first informative error line; long strings in
   tool-call arguments cut to head and tail; harness blocks in user text (``<system-reminder>``,
   ``<local-command-stdout>``, ...) replaced by a marker; reasoning left out. User and assistant
   text stay whole.
2. elide the oldest middle turns: whole tool units after the first (the task statement) and before
   the last, oldest first; each run of them becomes one marker naming how many messages and which
   tools went, followed by the user's own messages of those turns (asks, prior checkpoints).
3. cut every long text to its head and tail, the elision marked: the agent's texts and the tool
   traffic first, then, if that is not enough, the user's messages too.
4. leave out the oldest user messages kept from elided turns, the run's marker counting them.

Nothing goes silently: every cut leaves a marker saying what went. Only the request is shortened;
the log keeps every message, and the completion step (:mod:`compaction.handover.completion`, default
``appendix``) restores in the checkpoint the identifiers, user asks and errors of the whole span
that the summary missed.

The digest is a pure function of the span, the budget and the price of a message, so
:class:`DigestSummarizer` records those on its output (:class:`~compaction.vocabulary.events.DigestRecord`,
stored on ``compact/summary.digest``) and ``compaction audit --request`` rebuilds the digested
request that was sent. The price is recorded by name: a meter's ``message`` (``meter.name``), or a
:class:`ScaledEstimate` of one (what :func:`~compaction.summarizers.local.local_estimate` returns);
any other callable still digests, but its compactions cannot be rebuilt.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

import msgspec

from compaction.engine.meters import Meter, meter_named
from compaction.errors import CompactionConfigError, ContextLengthError
from compaction.handover.calls import failed, result_text
from compaction.handover.harness_text import FENCE_RE, HARNESS_BLOCK_RE, clean_user_text
from compaction.handover.outcomes import first_informative_line
from compaction.sessions.blocks import (
    Block,
    Message,
    OpaqueBlock,
    ReasoningBlock,
    Source,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    text_of,
    tool_calls_of,
)
from compaction.summarizers.chunking import ChunkingSummarizer, Estimate, elide_text, fit_unit, tool_units
from compaction.vocabulary.checkpoint import framed_summary
from compaction.vocabulary.events import DigestRecord
from compaction.vocabulary.summarizer import Summarizer, SummaryOutput, SummaryRequest

__all__ = [
    "DIGEST_HINT",
    "Digest",
    "DigestSummarizer",
    "ScaledEstimate",
    "condense",
    "condense_arguments",
    "condense_lines",
    "digest_span",
    "estimate_name",
    "estimate_named",
    "without_harness",
]

log = logging.getLogger("compaction.summarizers")

HEAD_LINES = 6
TAIL_LINES = 3
"""Lines of a tool result kept from its start and its end."""
LINE_CHARS = 200
"""Characters of one kept line of a tool result (head and tail of a longer one)."""
ARGUMENT_CHARS = 300
"""Characters of one string in a tool call's arguments (head and tail of a longer one)."""
TOOL_NAMES = 5
"""Tool names listed in a marker of elided turns (the most used first)."""

DIGEST_PLUGIN = "compaction.digest"
CUT = "\n[... {n} characters cut by the digest ...]\n"
LINES_CUT = "[... {n} lines cut by the digest ...]"
LINES_CUT_ERROR = "[... {n} lines cut by the digest; first error line: {line} ...]"
HARNESS_CUT = "[<{tag}> block cut by the digest]"
TURNS_ELIDED = "[... {n} messages of older turns elided by the digest to fit its input budget{detail} ...]"
DIGEST_HINT = (
    "raise the input budget (--digest-tokens N on the command line, tokens= in Python) or the "
    "summarizer window (--summarizer-window N), or lower max_tokens (--max-tokens N)"
)


@dataclass(frozen=True)
class Digest:
    """What one summarization request shows of a span, and how it was condensed."""

    messages: tuple[Message, ...]
    tokens: int
    """Estimated tokens of ``messages`` (at most the budget)."""
    source_tokens: int
    """Estimated tokens of the span's messages as they are in the log."""
    elided_messages: int = 0
    """Messages of older turns left out whole (step 2)."""
    dropped_asks: int = 0
    """User messages of elided turns left out too (step 4; each counted in a marker)."""
    source_messages: int = 0
    """Messages of the span."""
    condensed: int = 0
    """Messages of the span shortened or left out by step 1."""
    cut: int = 0
    """Messages shown with their long texts cut by step 3."""


# ---------------------------------------------------------------- the price of a message, by name


@dataclass(frozen=True)
class ScaledEstimate:
    """``base``'s price of a message times ``ratio``, rounded up: one message priced for another
    tokenizer (the local model's, see :func:`~compaction.summarizers.local.local_estimate`)."""

    base: Estimate
    ratio: float

    def __call__(self, message: Message) -> int:
        return math.ceil(self.base(message) * self.ratio)


def estimate_name(estimate: Estimate) -> tuple[str, float] | None:
    """The meter name and factor ``estimate`` prices by, when :func:`estimate_named` can price
    the same way again: a meter's ``message`` whose prices follow from its name (its
    ``price_key``), or a :class:`ScaledEstimate` of one. None for any other callable."""
    if isinstance(estimate, ScaledEstimate):
        named = estimate_name(estimate.base)
        return None if named is None else (named[0], named[1] * estimate.ratio)
    meter = getattr(estimate, "__self__", None)
    if isinstance(meter, Meter) and meter.price_key is not None and estimate == meter.message:
        return meter.name, 1.0
    return None


def unnamed(estimate: Estimate) -> str:
    """What the log records of an estimate :func:`estimate_name` cannot name."""
    return "unnamed:" + str(getattr(estimate, "__qualname__", type(estimate).__qualname__))


def estimate_named(meter: str, ratio: float = 1.0) -> Estimate:
    """The price :func:`estimate_name` named (:class:`CompactionConfigError` for an unknown meter)."""
    base = meter_named(meter).message
    return base if ratio == 1.0 else ScaledEstimate(base, ratio)


# ---------------------------------------------------------------- step 1: condense


def clip_line(line: str, width: int = LINE_CHARS) -> str:
    """One line of at most about ``width`` characters: head and tail, the cut marked."""
    if len(line) <= width:
        return line
    half = width // 2
    return f"{line[:half]} [... {len(line) - 2 * half} characters cut ...] {line[-half:]}"


def condense_lines(text: str, error_line: str | None = None) -> str:
    """``text`` cut to its first :data:`HEAD_LINES` and last :data:`TAIL_LINES` lines (each
    clipped), the cut marked; ``error_line`` is named in the marker when it was cut."""
    lines = [clip_line(line) for line in text.splitlines()]
    if len(lines) <= HEAD_LINES + TAIL_LINES + 1:
        return "\n".join(lines)
    head, tail = lines[:HEAD_LINES], lines[-TAIL_LINES:]
    cut = len(lines) - HEAD_LINES - TAIL_LINES
    kept = "\n".join([*head, *tail])
    if error_line and error_line not in kept:
        marker = LINES_CUT_ERROR.format(n=cut, line=clip_line(error_line))
    else:
        marker = LINES_CUT.format(n=cut)
    return "\n".join([*head, marker, *tail])


def _capped(value: object) -> object:
    if isinstance(value, str):
        return elide_text(value, ARGUMENT_CHARS, CUT)
    if isinstance(value, dict):
        return {k: _capped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_capped(v) for v in value]
    return value


def condense_arguments(arguments: str) -> str:
    """Tool-call arguments with their long strings cut, still valid JSON when they were (as
    written when nothing was cut)."""
    try:
        value = msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        return elide_text(arguments, ARGUMENT_CHARS, CUT)
    capped = _capped(value)
    return arguments if capped == value else msgspec.json.encode(capped).decode()


def without_harness(text: str) -> str:
    """User text with each harness block (``<system-reminder>``, ...) replaced by a marker."""
    return HARNESS_BLOCK_RE.sub(lambda found: HARNESS_CUT.format(tag=found.group(1)), text)


def _condensed_result(block: ToolResultBlock) -> ToolResultBlock:
    error = first_informative_line(result_text(block)) if failed(block) else None
    content = tuple(
        TextBlock(condense_lines(b.text, error)) if isinstance(b, TextBlock) else b for b in block.content
    )
    return msgspec.structs.replace(block, content=content)


def _condensed_block(block: Block, message: Message, observation: bool) -> Block | None:
    if isinstance(block, ReasoningBlock):
        return None
    if isinstance(block, OpaqueBlock):
        return TextBlock(f"[{block.kind}] {block.text}") if block.text else None
    if isinstance(block, ToolResultBlock):
        return _condensed_result(block)
    if isinstance(block, ToolCallBlock):
        return msgspec.structs.replace(block, arguments=condense_arguments(block.arguments))
    if isinstance(block, TextBlock) and observation:
        return TextBlock(condense_lines(block.text))
    if isinstance(block, TextBlock) and message.role == "user":
        return TextBlock(without_harness(block.text))
    return block


def condense(message: Message, observation: bool = False) -> Message | None:
    """Step 1 for one message; None when nothing of it is shown (reasoning only)."""
    blocks = [_condensed_block(b, message, observation) for b in message.content]
    content = tuple(b for b in blocks if b is not None)
    return msgspec.structs.replace(message, content=content) if content else None


def observations(messages: Sequence[Message]) -> list[bool]:
    """Per message: a user message answering the agent's fenced command, in a harness without
    tool calls (mini-swe-agent, SWE-agent text mode): an observation, not an ask."""
    if any(tool_calls_of(m) for m in messages):
        return [False] * len(messages)
    flags = [False]
    for previous, message in pairwise(messages):
        answers = previous.role == "assistant" and FENCE_RE.search(text_of(previous.content))
        flags.append(bool(answers) and message.role == "user" and message.source.kind == "user")
    return flags[: len(messages)]  # none for an empty span


def is_user_message(message: Message, observation: bool) -> bool:
    """What step 2 keeps of an elided turn: a prior checkpoint, or the user's own words (an ask
    or a slash command, not harness text alone)."""
    if framed_summary(message) is not None:
        return True
    if message.role != "user" or message.source.kind != "user" or observation:
        return False
    cleaned = clean_user_text(text_of(message.content))
    return bool(cleaned.ask or cleaned.slash_commands)


# ---------------------------------------------------------------- steps 2 to 4: elide, cut, drop


@dataclass
class _Run:
    """Consecutive elided turns: one marker, then the user's messages kept from them."""

    messages: int = 0
    tools: Counter[str] = field(default_factory=Counter)
    users: int = 0
    dropped: int = 0


@dataclass(frozen=True)
class _Line:
    """One message of the digest; ``run``: the elided run it is the marker of, or was kept from;
    ``user``: the user's own (see :func:`is_user_message`)."""

    message: Message
    run: int | None = None
    marker: bool = False
    user: bool = False


Unit = list[tuple[Message, bool]]
"""A tool unit of condensed messages, each with whether it is the user's own (see
:func:`is_user_message`)."""

_WIDEST_RUN = _Run(
    messages=10**6,
    tools=Counter({f"tool_name_{i:02}": 999 for i in range(TOOL_NAMES + 1)}),
    users=10**4 + 1,
    dropped=10**4,
)
"""A run whose marker is as long as any: what step 2 reserves for each marker it adds."""


def _marker(run: _Run, index: int) -> Message:
    names = ", ".join(f"{name} x{n}" for name, n in run.tools.most_common(TOOL_NAMES))
    more = len(run.tools) - TOOL_NAMES
    detail = f"; tool calls: {names}" if names else ""
    detail += f" and {more} other tools" if more > 0 else ""
    if run.dropped:
        detail += f"; {run.dropped} of the user's messages among them elided too"
    if run.users > run.dropped:
        detail += "; the user's messages among them follow"
    text = TURNS_ELIDED.format(n=run.messages + run.dropped, detail=detail)
    source = Source(kind="plugin", plugin=DIGEST_PLUGIN)
    return Message(id=f"digest/elided/{index}", role="user", content=(TextBlock(text),), source=source)


def _user_part(message: Message) -> Message:
    """A kept user message of an elided turn: its text only (its tool results went with the turn)."""
    return msgspec.structs.replace(
        message, content=tuple(b for b in message.content if isinstance(b, TextBlock))
    )


def _condensed(messages: Sequence[Message]) -> list[tuple[Message | None, bool]]:
    """Step 1 for each message, with whether it is the user's own (see :func:`is_user_message`)."""
    flags = observations(messages)
    return [(condense(m, o), is_user_message(m, o)) for m, o in zip(messages, flags, strict=True)]


def _units(kept: Sequence[tuple[Message | None, bool]]) -> list[Unit]:
    """The condensed messages in tool units, each marked when it is the user's own."""
    pairs = [(m, user) for m, user in kept if m is not None]
    units: list[Unit] = []
    position = 0
    for unit in tool_units([m for m, _ in pairs]):
        units.append(pairs[position : position + len(unit)])
        position += len(unit)
    return units


def _whole(unit: Unit) -> list[_Line]:
    return [_Line(m, user=user) for m, user in unit]


class _Planner:
    """The digest of one span under one budget (see the module)."""

    def __init__(self, messages: Sequence[Message], budget: int, estimate: Estimate) -> None:
        self.budget = budget
        self.estimate = estimate
        kept = _condensed(messages)
        self.condensed = sum(m != c for m, (c, _) in zip(messages, kept, strict=True))
        self.units = _units(kept)
        self.runs: list[_Run] = []
        self.cut_ids: set[str] = set()
        """Ids of the messages step 3 cut."""

    def size(self, lines: Sequence[_Line]) -> int:
        return sum(self.estimate(line.message) for line in lines)

    def fits(self, lines: Sequence[_Line]) -> bool:
        return self.size(lines) <= self.budget

    @staticmethod
    def users(unit: Unit) -> list[_Line]:
        return [_Line(_user_part(m), user=True) for m, user in unit if user]

    def elided(self) -> set[int]:
        """Step 2: the middle units to elide, oldest first, until the rest fits."""
        sizes = [self.size(_whole(unit)) for unit in self.units]
        total, chosen = sum(sizes), set[int]()
        allowance = self.estimate(_marker(_WIDEST_RUN, 0))
        for index in range(1, len(self.units) - 1):
            if total <= self.budget:
                break
            total -= sizes[index] - self.size(self.users(self.units[index]))
            total += 0 if index - 1 in chosen else allowance
            chosen.add(index)
        return chosen

    def lines(self, chosen: set[int]) -> list[_Line]:
        """The digest with the ``chosen`` units elided (a marker per run, then its user messages)."""
        lines: list[_Line] = []
        for index, unit in enumerate(self.units):
            if index not in chosen:
                lines += _whole(unit)
                continue
            if index - 1 not in chosen:
                self.runs.append(_Run())
                lines.append(_Line(_marker(self.runs[-1], 0), len(self.runs) - 1, marker=True))
            run, users = len(self.runs) - 1, self.users(unit)
            self.runs[run].messages += len(unit) - len(users)
            self.runs[run].users += len(users)
            self.runs[run].tools.update(call.name for m, _ in unit for call in tool_calls_of(m))
            lines += [_Line(line.message, run, user=True) for line in users]
        return self.remarked(lines)

    def remarked(self, lines: list[_Line]) -> list[_Line]:
        """``lines`` with each run's marker telling its current counts."""
        return [
            _Line(_marker(self.runs[line.run], line.run), line.run, marker=True)
            if line.marker and line.run is not None
            else line
            for line in lines
        ]

    def cut(self, lines: list[_Line], *, users: bool) -> list[_Line]:
        """Step 3: the long texts cut to head and tail: the user's messages only if ``users``,
        the markers never."""

        def held(line: _Line) -> bool:
            return line.marker or (line.user and not users)

        room = self.budget - self.size([line for line in lines if held(line)])
        texts = tuple(line.message for line in lines if not held(line))
        fitted = iter(fit_unit(texts, room, self.estimate))
        cut = [line if held(line) else _Line(next(fitted), line.run, user=line.user) for line in lines]
        self.cut_ids.update(a.message.id for a, b in zip(lines, cut, strict=True) if a.message != b.message)
        return cut

    def dropped(self, lines: list[_Line]) -> list[_Line]:
        """Step 4: the oldest user messages kept from elided runs left out until the rest fits."""
        while not self.fits(lines):
            index = next((i for i, x in enumerate(lines) if x.run is not None and not x.marker), None)
            if index is None:
                break
            run = lines.pop(index).run
            assert run is not None
            self.runs[run].dropped += 1
            lines = self.remarked(lines)
        return lines

    def plan(self) -> list[_Line]:
        lines = [line for unit in self.units for line in _whole(unit)]
        if self.fits(lines):
            return lines
        lines = self.lines(self.elided())
        for users in (False, True):  # the agent's texts and tool traffic first, then the user's
            if self.fits(lines):
                return lines
            lines = self.cut(lines, users=users)
        return lines if self.fits(lines) else self.dropped(lines)


def digest_span(
    messages: Sequence[Message], budget: int, estimate: Estimate, *, compaction_id: str = "?"
) -> Digest:
    """The digest of ``messages`` in at most ``budget`` tokens as ``estimate`` prices them (see the
    module); :class:`ContextLengthError` naming the flags when even the last step cannot fit it."""
    source = sum(estimate(m) for m in messages)
    if budget <= 0:
        raise ContextLengthError(
            f"compaction {compaction_id}: no input budget is left for the span's messages "
            f"({budget} tokens); {DIGEST_HINT}"
        )
    planner = _Planner(messages, budget, estimate)
    lines = planner.plan()
    shown = tuple(line.message for line in lines)
    tokens = planner.size(lines)
    if tokens > budget:
        raise ContextLengthError(
            f"compaction {compaction_id}: the digest of {len(messages)} messages ({source} "
            f"estimated tokens) still needs {tokens} after eliding older turns and cutting every "
            f"long text, over the input budget of {budget}; {DIGEST_HINT}"
        )
    return Digest(
        messages=shown,
        tokens=tokens,
        source_tokens=source,
        elided_messages=sum(run.messages for run in planner.runs),
        dropped_asks=sum(run.dropped for run in planner.runs),
        source_messages=len(messages),
        condensed=planner.condensed,
        cut=sum(not line.marker and line.message.id in planner.cut_ids for line in lines),
    )


# ---------------------------------------------------------------- the summarizer


class DigestSummarizer(Summarizer):
    """Wraps ``inner`` so each request shows the span as a digest of at most ``tokens`` tokens.

    ``estimate`` prices one message (the inner summarizer's own, e.g. ``local_estimate(...)`` for
    the embedded model). ``tokens=None`` takes the room one request of ``inner`` leaves for the
    messages (``inner`` must then be a :class:`ChunkingSummarizer`: its window, less the
    instruction, the header it sends and ``max_tokens``), so each compaction is one request. A
    larger ``tokens`` over a ChunkingSummarizer is split by it into a few chunks and a merge.
    The output records the digest (``SummaryOutput.digest``, see the module).
    """

    def __init__(self, inner: Summarizer, estimate: Estimate, *, tokens: int | None = None) -> None:
        if tokens is None and not isinstance(inner, ChunkingSummarizer):
            raise CompactionConfigError(
                "DigestSummarizer needs tokens= (the input budget) unless it wraps a "
                f"ChunkingSummarizer whose window gives one; got {type(inner).__name__} and no tokens"
            )
        if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens <= 0):
            raise CompactionConfigError(
                f"the digest's input budget (tokens=, --digest-tokens) must be a positive number of "
                f"tokens, got {tokens!r}"
            )
        self.inner = inner
        self.estimate = estimate
        self.tokens = tokens
        self.provider = inner.provider
        self.model = inner.model

    def budget(self, request: SummaryRequest) -> int:
        """The input budget for ``request``'s messages."""
        if self.tokens is not None:
            return self.tokens
        assert isinstance(self.inner, ChunkingSummarizer)
        return self.inner.room(request)

    async def summarize(self, request: SummaryRequest) -> SummaryOutput:
        budget = self.budget(request)
        digest = digest_span(request.messages, budget, self.estimate, compaction_id=request.compaction_id)
        log.info(
            "compaction %s: digest of %d messages (%d estimated tokens) in %d messages (%d), "
            "%d elided, %d user messages among them",
            request.compaction_id,
            len(request.messages),
            digest.source_tokens,
            len(digest.messages),
            digest.tokens,
            digest.elided_messages,
            digest.dropped_asks,
        )
        output = await self.inner.summarize(msgspec.structs.replace(request, messages=digest.messages))
        return msgspec.structs.replace(output, digest=self.record(digest, budget))

    def record(self, digest: Digest, budget: int) -> DigestRecord:
        """What the log keeps of ``digest`` (see :class:`~compaction.vocabulary.events.DigestRecord`)."""
        named = estimate_name(self.estimate)
        meter, ratio = named if named is not None else (unnamed(self.estimate), 1.0)
        chunker = self.inner if isinstance(self.inner, ChunkingSummarizer) else None
        return DigestRecord(
            budget=budget,
            meter=meter,
            ratio=ratio,
            window=chunker.window_tokens if chunker is not None else None,
            header=chunker is None or chunker.keep_header,
            tokens=digest.tokens,
            source_tokens=digest.source_tokens,
            messages=len(digest.messages),
            source_messages=digest.source_messages,
            condensed=digest.condensed,
            elided=digest.elided_messages,
            dropped_asks=digest.dropped_asks,
            cut=digest.cut,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()
