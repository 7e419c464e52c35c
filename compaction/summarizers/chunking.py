"""Oversize spans summarized in chunks, then merged (docs/architecture.md, difference 5).

When the request's messages do not fit the summarizer's own window (the window minus the
instruction, the system prompt, the tools and ``max_tokens``), the messages are cut into balanced
chunks at tool-unit boundaries: an assistant message with tool calls and every message up to its
last result stay together. Each chunk is summarized with the same system, tools and instruction;
one more call merges the partial summaries, given as user messages framed in
``<compacted-summary>`` tags (the instruction already says how to merge such blocks). A chunk the
server still rejects as too long is split again. A unit that alone exceeds the budget raises
:class:`~compaction.errors.ContextLengthError` naming the window to raise, unless ``elide=True``:
then its longest texts (tool output, file contents in tool arguments) are cut to their head and
tail, the elision marked, until it fits. The log keeps every message whole; only what this one
summarization request shows is shortened (and the completion step, ``compaction.handover.completion``,
restores the span's verbatim identifiers in the checkpoint). ``keep_header=False`` leaves the
conversation's system prompt and tools out of the requests (a small local model gains nothing
from them: no prompt cache to share, and they can fill its whole window).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import msgspec

from compaction.errors import ContextLengthError
from compaction.sessions.blocks import (
    Block,
    Message,
    Source,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    tool_calls_of,
)
from compaction.sessions.events import Usage
from compaction.summarizers.payloads import instruction_message
from compaction.vocabulary.instruction import CLOSE_TAG, INSTRUCTION_PLUGIN, OPEN_TAG
from compaction.vocabulary.summarizer import Summarizer, SummaryOutput, SummaryRequest

Estimate = Callable[[Message], int]
Unit = tuple[Message, ...]

MAX_DEPTH = 4
"""Nested chunk-then-merge levels allowed before giving up with ContextLengthError."""

WINDOW_HINT = (
    "raise the summarizer window (--summarizer-window N on the command line, window_tokens= in "
    "Python) or lower max_tokens (--max-tokens N)"
)
MIN_KEPT = 120
"""Characters an elided text keeps at least (head and tail together)."""
ELISION = "\n[... {n} characters elided to fit the summarizer window ...]\n"


def tool_units(messages: Sequence[Message]) -> list[Unit]:
    """Messages grouped so that no cut separates a tool call from its results."""
    units: list[list[Message]] = []
    pending: set[str] = set()
    for message in messages:
        if pending:
            units[-1].append(message)
        else:
            units.append([message])
        pending |= {call.id for call in tool_calls_of(message)}
        pending -= _answered(message)
    return [tuple(unit) for unit in units]


def _answered(message: Message) -> set[str]:
    return {b.tool_call_id for b in message.content if isinstance(b, ToolResultBlock)}


def _greedy(sizes: Sequence[int], cap: int) -> list[int]:
    """Start indexes of the chunks made by filling each up to ``cap`` in order."""
    starts: list[int] = []
    total = cap + 1
    for index, size in enumerate(sizes):
        if total + size > cap:
            starts.append(index)
            total = 0
        total += size
    return starts


def chunk_count(sizes: Sequence[int], budget: int) -> int:
    """The fewest in-order chunks of at most ``budget`` (each size must fit on its own)."""
    return len(_greedy(sizes, budget))


def balanced_chunks(sizes: Sequence[int], count: int) -> list[int]:
    """Start indexes of at most ``count`` in-order chunks whose largest is as small as possible
    (so the chunks come out about the same size)."""
    low, high = max(*sizes, -(-sum(sizes) // count)), sum(sizes)
    while low < high:
        middle = (low + high) // 2
        if len(_greedy(sizes, middle)) <= count:
            high = middle
        else:
            low = middle + 1
    return _greedy(sizes, low)


def framed_partial(output: SummaryOutput, request: SummaryRequest, index: int) -> Message:
    return Message(
        id=f"{request.compaction_id}/partial/{index}",
        role="user",
        content=(TextBlock(f"{OPEN_TAG}\n{output.text}\n{CLOSE_TAG}"),),
        source=Source(kind="plugin", plugin=INSTRUCTION_PLUGIN, compaction_id=request.compaction_id),
    )


def total_usage(outputs: Sequence[SummaryOutput]) -> Usage | None:
    usages = [o.usage for o in outputs if o.usage is not None]
    if not usages:
        return None
    return Usage(
        input_tokens=sum(u.input_tokens for u in usages),
        output_tokens=sum(u.output_tokens for u in usages),
        cache_read_tokens=sum(u.cache_read_tokens for u in usages),
        cache_write_tokens=sum(u.cache_write_tokens for u in usages),
        reasoning_tokens=sum(u.reasoning_tokens for u in usages),
    )


def elide_text(text: str, keep: int, marker: str = ELISION) -> str:
    """``text`` cut to about ``keep`` characters: its head and tail, the elision marked
    (``marker``, formatted with ``n``, the characters that went)."""
    keep = max(keep, MIN_KEPT)
    if len(text) <= keep + len(marker) + 8:
        return text
    head = keep // 2
    tail = keep - head
    return text[:head] + marker.format(n=len(text) - keep) + text[-tail:]


def _elide_value(value: object, factor: float) -> object:
    if isinstance(value, str):
        return elide_text(value, int(len(value) * factor))
    if isinstance(value, dict):
        return {k: _elide_value(v, factor) for k, v in value.items()}
    if isinstance(value, list):
        return [_elide_value(v, factor) for v in value]
    return value


def _elide_arguments(arguments: str, factor: float) -> str:
    """Tool-call arguments with their long strings cut, still valid JSON when they were."""
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError:
        return elide_text(arguments, int(len(arguments) * factor))
    return json.dumps(_elide_value(value, factor), ensure_ascii=False)


def _elide_block(block: Block, factor: float) -> Block:
    if isinstance(block, TextBlock):
        return TextBlock(elide_text(block.text, int(len(block.text) * factor)))
    if isinstance(block, ToolCallBlock):
        return msgspec.structs.replace(block, arguments=_elide_arguments(block.arguments, factor))
    if isinstance(block, ToolResultBlock):
        content = tuple(
            TextBlock(elide_text(b.text, int(len(b.text) * factor))) if isinstance(b, TextBlock) else b
            for b in block.content
        )
        return msgspec.structs.replace(block, content=content)
    return block


def fit_unit(unit: Unit, budget: int, estimate: Estimate) -> Unit:
    """``unit`` with its long texts cut (head and tail kept) until it fits ``budget``, or as
    short as :data:`MIN_KEPT` allows (the caller checks)."""
    size = sum(estimate(m) for m in unit)
    factor = 1.0
    for _ in range(6):
        if size <= budget or size <= 0:  # nothing left to cut (a budget already spent: below 0)
            break
        factor *= max(0.05, 0.9 * budget / size)
        unit = tuple(
            msgspec.structs.replace(m, content=tuple(_elide_block(b, factor) for b in m.content))
            for m in unit
        )
        size = sum(estimate(m) for m in unit)
    return unit


class ChunkingSummarizer(Summarizer):
    """Wraps ``inner`` so spans larger than its ``window_tokens`` are summarized in chunks.

    ``estimate`` prices one message in tokens (for example ``HeuristicMeter().message``).
    ``SummaryOutput.chunks`` is the number of chunk calls (1 when the span fit in one call);
    usage is the sum over every call, the model the one that wrote the merged summary.
    ``elide``: cut a unit that alone exceeds the budget instead of raising; ``keep_header``:
    send the conversation's system prompt and tools (see the module's docstring).
    """

    def __init__(
        self,
        inner: Summarizer,
        window_tokens: int,
        estimate: Estimate,
        *,
        elide: bool = False,
        keep_header: bool = True,
    ) -> None:
        self.inner = inner
        self.window_tokens = window_tokens
        self.estimate = estimate
        self.elide = elide
        self.keep_header = keep_header
        self.provider = inner.provider
        self.model = inner.model

    def budget(self, request: SummaryRequest) -> int:
        """Tokens left for the messages once the instruction, system, tools and cap are paid."""
        fixed = [instruction_message(request)]
        if request.system:
            fixed.append(Message(id="system", role="system", content=(TextBlock(request.system),)))
        if request.tools:
            tools = msgspec.json.encode(request.tools).decode()
            fixed.append(Message(id="tools", role="system", content=(TextBlock(tools),)))
        return self.window_tokens - request.max_tokens - sum(self.estimate(m) for m in fixed)

    def prepared(self, request: SummaryRequest) -> SummaryRequest:
        """``request`` as this summarizer sends it (without the header unless ``keep_header``)."""
        if self.keep_header:
            return request
        return msgspec.structs.replace(request, system=None, tools=())

    def room(self, request: SummaryRequest) -> int:
        """Tokens one request leaves for the messages of ``request`` as it will be sent."""
        return self.budget(self.prepared(request))

    async def summarize(self, request: SummaryRequest) -> SummaryOutput:
        request = self.prepared(request)
        output = await self._summarize(request, self.budget(request), 0)
        return output if self.keep_header else msgspec.structs.replace(output, header=False)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def _summarize(self, request: SummaryRequest, budget: int, depth: int) -> SummaryOutput:
        units = tool_units(request.messages)
        sizes = [sum(self.estimate(m) for m in unit) for unit in units]
        if budget > 0 and sum(sizes) <= budget:
            try:
                return await self.inner.summarize(request)
            except ContextLengthError:
                if depth >= MAX_DEPTH or (len(units) < 2 and not self.elide):
                    raise
                if len(units) < 2:  # the estimate was too low for one unit: cut it further
                    return await self._summarize(request, min(budget, sum(sizes)) * 2 // 3, depth + 1)
                count = 2  # the estimate was too low: split this span in two and try again
        else:
            if self.elide and budget > 0:
                units = [
                    u if n <= budget else fit_unit(u, budget, self.estimate)
                    for u, n in zip(units, sizes, strict=True)
                ]
                sizes = [sum(self.estimate(m) for m in unit) for unit in units]
                if sum(sizes) <= budget:  # cut to fit: one call, no merge
                    cut = msgspec.structs.replace(request, messages=tuple(m for u in units for m in u))
                    return await self._summarize(cut, budget, depth + 1)
            self._check_fits(request, units, sizes, budget, depth)
            count = chunk_count(sizes, budget)
        starts = balanced_chunks(sizes, count)
        ends = [*starts[1:], len(units)]
        chunk_budget = max(sum(sizes[a:b]) for a, b in zip(starts, ends, strict=True))
        partials: list[SummaryOutput] = []
        for start, end in zip(starts, ends, strict=True):
            chunk = tuple(m for unit in units[start:end] for m in unit)
            sub = msgspec.structs.replace(request, messages=chunk)
            partials.append(await self._summarize(sub, chunk_budget, depth + 1))
        framed = tuple(framed_partial(p, request, i) for i, p in enumerate(partials))
        merge = msgspec.structs.replace(request, messages=framed)
        merged = await self._summarize(merge, budget, depth + 1)
        return SummaryOutput(
            text=merged.text,
            provider=merged.provider,
            model=merged.model,
            max_tokens=request.max_tokens,
            usage=total_usage([*partials, merged]),
            chunks=sum(p.chunks for p in partials),
        )

    def _check_fits(
        self,
        request: SummaryRequest,
        units: list[Unit],
        sizes: list[int],
        budget: int,
        depth: int,
    ) -> None:
        window = (
            f"the summarizer window of {self.window_tokens} tokens leaves {budget} for messages "
            f"after the instruction, system prompt, tools and max_tokens {request.max_tokens}"
        )
        if depth > MAX_DEPTH:
            raise ContextLengthError(
                f"compaction {request.compaction_id}: the span still does not fit after "
                f"{MAX_DEPTH} chunk-and-merge levels ({sum(sizes)} estimated tokens; {window}); "
                f"{WINDOW_HINT}"
            )
        if budget <= 0:
            raise ContextLengthError(f"compaction {request.compaction_id}: {window}; {WINDOW_HINT}")
        largest = max(sizes, default=0)
        if largest > budget:
            unit = units[sizes.index(largest)]
            raise ContextLengthError(
                f"compaction {request.compaction_id}: messages {unit[0].id}..{unit[-1].id} form "
                f"one unsplittable unit (a message with its tool calls and results) of {largest} "
                f"estimated tokens, but {window}"
                + ("" if not self.elide else ", even with its long texts cut")
                + f"; {WINDOW_HINT}"
            )
