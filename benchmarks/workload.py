"""A synthetic, tool-heavy agent session: the workload every benchmark uses.

Each turn is ``turn/start`` + ``user/message``, then tool steps of five events (``step/start``,
``assistant/message`` with one tool call, ``tool/call``, ``tool/result``, ``step/end``), then a final
answer step and ``turn/end``. :func:`agent_batches` yields the events one save at a time (one agent
step per save), exactly as an agent loop would hand them to the store.
"""

from __future__ import annotations

from collections.abc import Iterator

from sessions.blocks import Message, Source, TextBlock, ToolCallBlock, ToolResultBlock
from sessions.events import (
    AssistantMessage,
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

STEPS_PER_TURN = 8
MODEL = Source(kind="model", provider="bench", model="bench-1")
RESULT_TEXT = "line of tool output with a path src/app/module.py:42 and an error string\n" * 6


def _turn_open(turn: int) -> list[SessionEvent]:
    prompt = Message(
        id=f"u{turn}", role="user", content=(TextBlock(f"turn {turn}: fix the failing tests"),)
    )
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
        id=f"a{turn}.{step}", role="assistant", content=(TextBlock("All tests pass now."),),
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
