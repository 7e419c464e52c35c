"""Small builders for hand-made sessions in tests (real events, real folds)."""

from __future__ import annotations

import json

from compaction.sessions.blocks import Message, Source, TextBlock, ToolCallBlock, ToolResultBlock
from compaction.sessions.events import (
    AssistantMessage,
    RequestHeader,
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

MODEL = Source(kind="model", provider="test", model="test-model")


def user(session: Session, text: str, msg_id: str | None = None) -> int:
    event = session.append(
        UserMessage(
            message=Message(
                id=msg_id or f"u{len(session)}", role="user", content=(TextBlock(text),)
            ),
            surface_op="append",
        )
    )
    return event.seq


def start_turn(
    session: Session, *, window: int | None = 4000, system: str | None = "You are a test agent."
) -> int:
    turn = session.structure.next_turn
    session.append(TurnStart(turn=turn))
    if session.last_of("request/header") is None:
        session.append(
            RequestHeader(provider="test", model="test-model", system=system, context_window=window)
        )
    return turn


def end_turn(session: Session) -> None:
    assert session.open_turn is not None
    session.append(TurnEnd(turn=session.open_turn, reason=TurnEndReason("completed")))


def tool_step(
    session: Session,
    n_calls: int = 1,
    output: str = "ok",
    text: str = "working",
    close: bool = True,
) -> tuple[int, list[int]]:
    """One step: an assistant message with ``n_calls`` bash calls and their results."""
    turn = session.open_turn
    assert turn is not None
    step = session.structure.next_step
    session.append(StepStart(turn=turn, step=step))
    calls = tuple(
        ToolCallBlock(
            f"c{len(session)}-{i}", "bash", json.dumps({"command": f"cat src/mod_{step}_{i}.py"})
        )
        for i in range(n_calls)
    )
    assistant = session.append(
        AssistantMessage(
            turn=turn,
            step=step,
            message=Message(
                id=f"a{len(session)}",
                role="assistant",
                content=(TextBlock(text), *calls),
                source=MODEL,
            ),
            surface_op="append",
        )
    )
    results: list[int] = []
    if not close:
        return assistant.seq, results
    for call in calls:
        call_event = session.append(
            ToolCall(
                turn=turn, step=step, call_id=call.id, name=call.name, arguments=call.arguments
            )
        )
        result = session.append(
            ToolResult(
                turn=turn,
                step=step,
                message=Message(
                    id=f"r{len(session)}",
                    role="user",
                    content=(ToolResultBlock(call.id, (TextBlock(output),)),),
                    source=Source(kind="tool", call_id=call.id),
                ),
                surface_op="append",
                source_event_seqs=(call_event.seq,),
            )
        )
        results.append(result.seq)
    session.append(StepEnd(turn=turn, step=step))
    return assistant.seq, results


def answer_step(session: Session, text: str = "done") -> int:
    turn = session.open_turn
    assert turn is not None
    step = session.structure.next_step
    session.append(StepStart(turn=turn, step=step))
    event = session.append(
        AssistantMessage(
            turn=turn,
            step=step,
            message=Message(
                id=f"a{len(session)}", role="assistant", content=(TextBlock(text),), source=MODEL
            ),
            surface_op="append",
        )
    )
    session.append(StepEnd(turn=turn, step=step))
    return event.seq
