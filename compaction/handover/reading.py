"""One message read for the walk of a span, once: its calls' keys and todo/plan items, its results'
outcomes, its text, its framework items (:func:`read`). With an active analysis a message object
is read once, so a compaction reads its span's messages again only when a message is new (the
read-ahead reads them as they arrive,
:meth:`~compaction.engine.service.CompactionEngine.observe`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from compaction.handover.analysis import active_analysis, remembered
from compaction.handover.calls import call_arguments, call_key, failed, result_text
from compaction.handover.harness_text import HARNESS_SOURCE, REJECTED, USER_SAID, clean_user_text
from compaction.handover.matching import needle
from compaction.handover.outcomes import first_informative_line
from compaction.handover.tasks import status_list
from compaction.sessions.blocks import (
    Message,
    OpaqueBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    text_of,
)
from compaction.sessions.memo import ENTRY_BYTES, STRING_BYTES, IdentityMemo
from compaction.vocabulary.checkpoint import framed_summary


@dataclass(frozen=True, slots=True)
class Call:
    """A tool call, read: what it acted on (:func:`~compaction.handover.calls.call_key`) and its
    todo/plan items."""

    block: ToolCallBlock
    key: str
    todo: list[tuple[str, str]] | None


@dataclass(frozen=True, slots=True)
class Result:
    """A tool result, read: whether it failed, whether it is the user's rejection of the call."""

    block: ToolResultBlock
    failed: bool
    rejected: bool
    said: str | None
    """What the user said when rejecting the call."""


@dataclass(frozen=True, slots=True)
class Read:
    """What the walk needs of one message, found once per message (:func:`read`)."""

    checkpoint: bool
    role: str
    from_user: bool
    items: tuple[Call | Result, ...]
    has_call: bool
    text: str
    """The agent's text (stripped), or the user's or the harness's (as written); empty otherwise."""
    chars: int
    """Characters of the message's text blocks, tool calls (name and arguments) and results."""
    opaque: tuple[tuple[str, str], ...] = ()
    """The message's framework items (:class:`~compaction.sessions.blocks.OpaqueBlock`): kind
    and what a reader may see of each, whitespace collapsed."""


def _read_size(message: Message, value: Read) -> int:
    """A message read: its text (often the message's own string, counted anyway) and its items."""
    return ENTRY_BYTES + len(value.text) + STRING_BYTES + 64 * len(value.items)


@remembered(lambda budget: IdentityMemo(budget, _read_size))
def read(message: Message) -> Read:
    """One message read for the walk (its calls' keys and todo items, its results' outcomes, its
    text); with an active analysis once per message object."""
    items: list[Call | Result] = []
    opaque: list[tuple[str, str]] = []
    chars = 0
    for block in message.content:
        if isinstance(block, ToolCallBlock):
            items.append(Call(block, call_key(block), status_list(call_arguments(block))))
            chars += len(block.name) + len(block.arguments)
        elif isinstance(block, ToolResultBlock):
            text = result_text(block)
            rejected = text.startswith(REJECTED)
            said = text.split(USER_SAID, 1) if rejected else []
            heard = said[1] if len(said) == 2 and said[1].strip() else None
            failure = failed(block)
            if failure:
                first_informative_line(text)  # found now (kept by text), for the errors
            items.append(Result(block, failure, rejected, heard))
            chars += len(text_of(block.content))
        elif isinstance(block, TextBlock):
            chars += len(block.text)
        elif isinstance(block, OpaqueBlock):
            opaque.append((block.kind, " ".join(block.text.split())))
    from_user = message.role == "user" and message.source.kind in ("user", HARNESS_SOURCE)
    text = ""
    if message.role == "assistant":
        text = text_of(message.content).strip()
    elif from_user:
        text = text_of(message.content)
        needle(clean_user_text(text).ask)  # found now (kept by text), for the walk and the gate
    return Read(
        checkpoint=framed_summary(message) is not None,
        role=message.role,
        from_user=from_user,
        items=tuple(items),
        has_call=any(type(i) is Call for i in items),
        text=text,
        chars=chars,
        opaque=tuple(opaque),
    )


def reads(messages: Sequence[Message]) -> list[Read]:
    """:func:`read` of every message (the active analysis looked up once)."""
    analysis = active_analysis()
    if analysis is None:
        return list(map(read.compute, messages))
    recall, compute = read.memo(analysis).get, read.compute
    return [recall(message, compute) for message in messages]
