"""An interrupted turn, in one place: which turn is open, which calls are pending in
it, and the events that close it.

Crash repair (``recovery``), a cancelled or failed step (``compaction.sessions.loop``) and importers
(a transcript whose call has no result) all answer a call with the same error result, marked
``synthesized``: ``ToolOutcomeUnknownError`` when a ``tool/call`` was recorded (citing it), else
``ToolNotStartedError``.

:func:`open_turn` scans the turn open at the end of a log: each ``tool-call`` block of an
``assistant/message`` registers a pending call (in block order) with that message's step; a
``tool/call`` for a registered call records its seq; a ``tool/result`` answers its call;
``step/end`` closes the step and clears pending calls. :func:`turn_closers` closes it: one synthetic
``tool/result`` per still-pending call, in registration order; ``step/end`` if a step is open;
``turn/end`` with the given reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from compaction.sessions.blocks import Message, Source, TextBlock, ToolResultBlock, tool_calls_of
from compaction.sessions.events import (
    UNSET_SEQ,
    UNSET_TIME,
    AssistantMessage,
    Replace,
    SessionEvent,
    StepEnd,
    StepStart,
    ToolCall,
    ToolError,
    ToolResult,
    TurnEnd,
    TurnEndReason,
    TurnStart,
)

if TYPE_CHECKING:
    from compaction.sessions.session import Session

OUTCOME_UNKNOWN = ToolError("ToolOutcomeUnknownError", "TOOL_OUTCOME_UNKNOWN")
OUTCOME_UNKNOWN_TEXT = (
    "The tool call was interrupted after it was recorded, but no result was durably recorded. Its "
    "outcome is unknown. Decide whether to retry from the tool semantics: retry only if the "
    "operation is read-only or idempotent; if it may have side effects, first verify external "
    "state or ask the user. Do not retry blindly."
)
NOT_STARTED = ToolError("ToolNotStartedError", "TOOL_NOT_STARTED")
NOT_STARTED_TEXT = (
    "The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed."
)


def interrupted_result(
    turn: int,
    step: int,
    call_id: str,
    call_seq: int | None,
    seq: int,
    *,
    time: datetime = UNSET_TIME,
    stamp: bool = False,
    origin: str | None = None,
) -> ToolResult:
    """The error result for ``call_id``; ``seq`` names the message id (and is stamped if ``stamp``)."""
    recorded = call_seq is not None
    error, text = (OUTCOME_UNKNOWN, OUTCOME_UNKNOWN_TEXT) if recorded else (NOT_STARTED, NOT_STARTED_TEXT)
    block = ToolResultBlock(tool_call_id=call_id, content=(TextBlock(text),), is_error=True)
    message = Message(
        id=f"interrupted-tool-result-{call_id}-{seq}",
        role="user",
        content=(block,),
        source=Source(kind="tool", call_id=call_id),
    )
    return ToolResult(
        turn=turn,
        step=step,
        message=message,
        error=error,
        synthesized=True,
        surface_op="append",
        source_event_seqs=(call_seq,) if call_seq is not None else None,
        seq=seq if stamp else UNSET_SEQ,
        time=time,
        origin=origin,
    )


# ---------------------------------------------------------------- the open turn


@dataclass
class PendingCall:
    """A tool-call block of the open step that no result answered yet."""

    call_id: str
    step: int
    call_seq: int | None = None  # its tool/call, once recorded


@dataclass
class OpenTurn:
    """The turn open at the end of a log: its open step and the calls pending in that step."""

    turn: int
    start_seq: int
    step: int | None = None
    pending: dict[str, PendingCall] = field(default_factory=dict)

    def feed(self, event: SessionEvent) -> None:
        """Fold one event of the turn (after its ``turn/start``)."""
        if isinstance(event, StepStart):
            self.step = event.step
        elif isinstance(event, StepEnd):
            self.step = None
            self.pending.clear()
        elif isinstance(event, AssistantMessage):
            for call in tool_calls_of(event.message):
                self.pending[call.id] = PendingCall(call.id, event.step)
        elif isinstance(event, ToolCall) and event.call_id in self.pending:
            self.pending[event.call_id].call_seq = event.seq
        elif isinstance(event, ToolResult) and not isinstance(event.surface_op, Replace):
            for call_id in answered_calls(event):
                self.pending.pop(call_id, None)


def open_turn(session: Session) -> OpenTurn | None:
    """The turn open at the end of ``session``'s log, scanned from its ``turn/start`` (None: none is)."""
    start_seq = session.last_of(TurnStart.TYPE)
    end_seq = session.last_of(TurnEnd.TYPE)
    if start_seq is None or (end_seq is not None and end_seq > start_seq):
        return None
    start = session.event(start_seq)
    assert isinstance(start, TurnStart)
    opened = OpenTurn(start.turn, start_seq)
    for event in session.events(start_seq + 1):
        opened.feed(event)
    return opened


def turn_closers(
    session: Session, reason: TurnEndReason, *, time: datetime = UNSET_TIME
) -> list[SessionEvent]:
    """The events that close the open turn of ``session`` (none when no turn is open), stamped
    with the seqs that follow the log and with ``time`` (default: the session's clock on append)."""
    opened = open_turn(session)
    if opened is None:
        return []
    turn, seq = opened.turn, len(session)
    closers: list[SessionEvent] = []
    for pending in opened.pending.values():
        closers.append(
            interrupted_result(
                turn,
                pending.step,
                pending.call_id,
                pending.call_seq,
                seq + len(closers),
                time=time,
                stamp=True,
            )
        )
    if opened.step is not None:
        closers.append(StepEnd(turn=turn, step=opened.step, seq=seq + len(closers), time=time))
    closers.append(TurnEnd(turn=turn, reason=reason, seq=seq + len(closers), time=time))
    return closers


def answered_calls(event: ToolResult) -> list[str]:
    """The call ids a tool result answers (its result blocks' and its source's)."""
    ids = [b.tool_call_id for b in event.message.content if isinstance(b, ToolResultBlock)]
    if event.message.source.call_id:
        ids.append(event.message.source.call_id)
    return ids
