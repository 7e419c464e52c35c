"""A synthetic, tool-heavy agent session: the workload every benchmark uses.

Each turn is ``turn/start`` + ``user/message``, then tool steps of five events
(``step/start``, ``assistant/message`` with one tool call, ``tool/call``, ``tool/result``,
``step/end``), then a final answer step and ``turn/end``. :func:`agent_batches` yields the events
one save at a time (one agent step per save), exactly as an agent loop would hand them to the store.

:func:`compacted_batches` adds what a long-running agent also logs: every few turns a standalone
compaction (``compact/start``; then ``compact/summary``, a ``user/message`` checkpoint replacing the
whole surface, ``compact/end``), so the surface stays bounded the way it does in real use.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

from compaction.sessions.blocks import Message, Source, TextBlock, ToolCallBlock, ToolResultBlock
from compaction.sessions.events import (
    AssistantMessage,
    Replace,
    SessionEvent,
    StepEnd,
    StepStart,
    ToolCall,
    ToolResult,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    UserMessage,
)
from compaction.sessions.session import Session
from compaction.vocabulary.events import (
    COMPACT_PLUGIN,
    CompactEnd,
    CompactStart,
    CompactSummary,
    Lease,
    ShadowedRange,
)

STEPS_PER_TURN = 8
MODEL = Source(kind="model", provider="bench", model="bench-1")
RESULT_TEXT = "line of tool output with a path src/app/module.py:42 and an error string\n" * 6


def _turn_open(turn: int) -> list[SessionEvent]:
    prompt = Message(id=f"u{turn}", role="user", content=(TextBlock(f"turn {turn}: fix the failing tests"),))
    return [TurnStart(turn=turn), UserMessage(message=prompt, surface_op="append")]


def _tool_step(turn: int, step: int) -> list[SessionEvent]:
    call_id = f"call-{turn}-{step}"
    arguments = '{"command": "pytest -x tests/test_module.py"}'
    assistant = Message(
        id=f"a{turn}.{step}",
        role="assistant",
        content=(
            TextBlock("Running the tests to see what fails."),
            ToolCallBlock(id=call_id, name="bash", arguments=arguments),
        ),
        source=MODEL,
    )
    result = Message(
        id=f"r{turn}.{step}",
        role="user",
        content=(ToolResultBlock(tool_call_id=call_id, content=(TextBlock(RESULT_TEXT),)),),
        source=Source(kind="tool", call_id=call_id),
    )
    return [
        StepStart(turn=turn, step=step),
        AssistantMessage(turn=turn, step=step, message=assistant, surface_op="append"),
        ToolCall(turn=turn, step=step, call_id=call_id, name="bash", arguments=arguments),
        ToolResult(turn=turn, step=step, message=result, surface_op="append"),
        StepEnd(turn=turn, step=step),
    ]


def _turn_close(turn: int, step: int) -> list[SessionEvent]:
    answer = Message(
        id=f"a{turn}.{step}",
        role="assistant",
        content=(TextBlock("All tests pass now."),),
        source=MODEL,
    )
    return [
        StepStart(turn=turn, step=step),
        AssistantMessage(turn=turn, step=step, message=answer, surface_op="append"),
        StepEnd(turn=turn, step=step),
        TurnEnd(turn=turn, reason=TurnEndReason(kind="completed")),
    ]


def _all_batches() -> Iterator[list[SessionEvent]]:
    turn = 0
    while True:
        turn += 1
        yield _turn_open(turn)
        for step in range(1, STEPS_PER_TURN + 1):
            yield _tool_step(turn, step)
        yield _turn_close(turn, STEPS_PER_TURN + 1)


def agent_batches(total: int) -> Iterator[list[SessionEvent]]:
    """Batches of unstamped events (one agent step each) adding up to exactly ``total`` events."""
    left = total
    for batch in _all_batches():
        if left <= 0:
            return
        yield batch[:left]
        left -= len(batch)


def agent_events(total: int) -> list[SessionEvent]:
    return [event for batch in agent_batches(total) for event in batch]


LEASE = Lease(host="bench", pid=1, expires_at=datetime(2030, 1, 1, tzinfo=UTC))
SUMMARY = (TextBlock("## Goal\nfix the failing tests\n## Progress\nran pytest; fixed module.py"),)


def compaction_batches(session: Session, number: int) -> Iterator[list[SessionEvent]]:
    """A standalone compaction of the whole (balanced) surface: lock, then the atomic commit."""
    compaction_id = f"c{number}"
    start_seq = len(session)
    yield [CompactStart(compaction_id=compaction_id, turn=None, lease=LEASE)]
    shadowed = tuple(session.nodes)
    summary = CompactSummary(
        compaction_id=compaction_id,
        summary=SUMMARY,
        shadowed_range=ShadowedRange(shadowed[0], shadowed[-1]),
        shadowed_seqs=shadowed,
        shadowed_token_count=100 * len(shadowed),
        provider="bench",
        model="bench-1",
    )
    checkpoint = Message(
        id=f"checkpoint-{compaction_id}",
        role="user",
        content=SUMMARY,
        source=Source(kind="plugin", plugin=COMPACT_PLUGIN, compaction_id=compaction_id),
    )
    replacement = UserMessage(
        message=checkpoint,
        surface_op=Replace(shadowed[0], shadowed[-1]),
        source_event_seqs=(start_seq, start_seq + 1, *shadowed),
    )
    yield [summary, replacement, CompactEnd(compaction_id=compaction_id, turn=None)]


def compacted_batches(session: Session, total: int, every_turns: int = 20) -> Iterator[list[SessionEvent]]:
    """Like :func:`agent_batches` for ``session``, compacting the surface every ``every_turns``."""
    left, turn, compactions = total, 0, 0
    for batch in _all_batches():
        if isinstance(batch[0], TurnStart):
            turn = batch[0].turn
            if turn % every_turns == 0:
                compactions += 1
                for commit in compaction_batches(session, compactions):
                    if left <= 0:
                        return
                    yield commit[:left]
                    left -= len(commit)
        if left <= 0:
            return
        yield batch[:left]
        left -= len(batch)
