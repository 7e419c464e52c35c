"""The walk of a span: one pass over its messages, read (:mod:`compaction.handover.reading`), that
pairs each tool call with its result as a :class:`Step` and sorts the user-role messages into the
user's asks, the harness's feedback, the harness's notes and, in a harness without tool calls
(mini-swe-agent, SWE-agent text mode), the observations of the agent's fenced commands. A prior
framed checkpoint in the span is skipped (it carries the agent's earlier state)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from compaction.handover.calls import COMMAND_CHARS
from compaction.handover.harness_text import (
    FENCE_RE,
    HARNESS_SOURCE,
    clean_user_text,
    harness_feedback,
    harness_note,
)
from compaction.handover.reading import Call, Read, Result
from compaction.sessions.blocks import Message, ToolCallBlock, ToolResultBlock, text_of


@dataclass(slots=True)
class Step:
    call: ToolCallBlock
    result: ToolResultBlock | None = None
    key: str = ""
    """:func:`~compaction.handover.calls.call_key` of the call."""
    todo: list[tuple[str, str]] | None = None
    """The call's todo/plan items (:func:`~compaction.handover.tasks.status_list` of its arguments)."""
    failed: bool = False
    """:func:`~compaction.handover.calls.failed` of the result."""
    rejected: bool = False
    """The result is the user's rejection of the call."""


@dataclass
class Walk:
    asks: list[str] = field(default_factory=list)
    slash: list[str] = field(default_factory=list)
    interruptions: int = 0
    steps: list[Step] = field(default_factory=list)
    by_id: dict[str, Step] = field(default_factory=dict)
    observations: list[tuple[str, str]] = field(default_factory=list)  # (command, text)
    feedback: list[tuple[int, str]] = field(default_factory=list)  # (index of the next step, text)
    text_harness: bool = False
    """No tool call in the span: a user message answering a fenced command is an observation."""
    agent_texts: list[tuple[int, str]] = field(default_factory=list)  # (position, text)
    last_ask_at: int = -1
    checkpoint_at: int = -1
    context: list[str] = field(default_factory=list)
    """Notes of what the harness wrote in the user's role (skills loaded, meta messages)."""


def walk_span(messages: Sequence[Message], reads: Sequence[Read]) -> Walk:
    """One pass over the span's messages, read (the hot loop of a compaction: kept flat)."""
    walk = Walk()
    walk.text_harness = not any(r.has_call for r in reads)
    steps, by_id, agent_texts = walk.steps, walk.by_id, walk.agent_texts
    previous: Message | None = None
    for position, found in enumerate(reads):
        if found.checkpoint:
            walk.checkpoint_at = position  # a prior checkpoint carries the agent's later state
        else:
            for item in found.items:
                if type(item) is Call:
                    step = Step(item.block, key=item.key, todo=item.todo)
                    steps.append(step)
                    by_id[item.block.id] = step
                else:
                    _result(walk, item, position)  # type: ignore[arg-type]
            if found.role == "assistant":
                if found.text:
                    agent_texts.append((position, found.text))
            elif found.from_user:
                if messages[position].source.kind == HARNESS_SOURCE:
                    _harness_message(walk, found.text)
                else:
                    _user_message(walk, found.text, previous, position)
        previous = messages[position]
    return walk


def _user_message(walk: Walk, text: str, previous: Message | None, position: int) -> None:
    """A user-role message: an observation of a fenced command, the harness's feedback, or the
    user's own words."""
    command = _fenced_command(previous) if walk.text_harness else None
    if command is not None:
        walk.observations.append((command, text))
    elif harness_feedback(text, previous):
        walk.feedback.append((len(walk.steps), text))
    else:
        _user(walk, text, position)


def _harness_message(walk: Walk, text: str) -> None:
    """A user-role message the harness wrote: context, never an ask."""
    note = harness_note(text)
    if note is not None:
        walk.context.append(note)


def _result(walk: Walk, item: Result, position: int) -> None:
    step = walk.by_id.get(item.block.tool_call_id)
    if step is not None:
        step.result = item.block
        step.failed = item.failed
        step.rejected = item.rejected
    if item.rejected:
        walk.interruptions += 1
        if item.said is not None:
            _user(walk, item.said, position)


def _user(walk: Walk, text: str, position: int) -> None:
    cleaned = clean_user_text(text)
    walk.context.extend(cleaned.context)
    walk.slash.extend(cleaned.slash_commands)
    walk.interruptions += cleaned.interrupted
    if cleaned.ask:
        walk.asks.append(cleaned.ask)
        walk.last_ask_at = position


def _fenced_command(previous: Message | None) -> str | None:
    """In a harness without tool calls, the command of the agent message a user message answers."""
    if previous is None or previous.role != "assistant":
        return None
    blocks = FENCE_RE.findall(text_of(previous.content))
    if not blocks:
        return None
    lines = blocks[-1].strip().splitlines()
    return lines[0][:COMMAND_CHARS] if lines else ""
