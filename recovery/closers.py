"""Interrupted-turn closers (spec §d.16): the events that close a turn its process left open.

A pure function over a loaded log. The scan covers the open turn: each ``tool-call`` block of
an ``assistant/message`` registers a pending call (in block order) with that message's step; a
``tool/call`` for a registered call records its seq; a ``tool/result`` answers its call;
``step/end`` closes the step and clears pending calls. If no turn is open there is nothing to
close. Otherwise, with seqs continuing after the last event and ``time`` = the last event's time:

1. one synthetic ``tool/result`` per still-pending call, in registration order (``error``
   ``ToolOutcomeUnknownError`` / ``TOOL_OUTCOME_UNKNOWN`` when a ``tool/call`` was recorded and then
   ``source_event_seqs = [that seq]``, else ``ToolNotStartedError`` / ``TOOL_NOT_STARTED``);
2. ``step/end`` if a step is open;
3. ``turn/end {reason: interrupted}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from compaction.sessions.blocks import ToolResultBlock, tool_calls_of
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
)
from compaction.sessions.interrupted import interrupted_result
from compaction.sessions.session import Session


@dataclass
class _Pending:
    call_id: str
    step: int
    call_seq: int | None = None


@dataclass
class _TurnScan:
    turn: int
    step: int | None = None
    pending: dict[str, _Pending] = field(default_factory=dict)

    def feed(self, event: SessionEvent) -> None:
        if isinstance(event, StepStart):
            self.step = event.step
        elif isinstance(event, StepEnd):
            self.step = None
            self.pending.clear()
        elif isinstance(event, AssistantMessage):
            for call in tool_calls_of(event.message):
                self.pending[call.id] = _Pending(call.id, event.step)
        elif isinstance(event, ToolCall) and event.call_id in self.pending:
            self.pending[event.call_id].call_seq = event.seq
        elif isinstance(event, ToolResult) and not isinstance(event.surface_op, Replace):
            for call_id in _answered(event):
                self.pending.pop(call_id, None)


def open_turn_of(session: Session) -> tuple[int, int] | None:
    """``(turn, turn/start seq)`` of the turn open at the end of the log, or None."""
    start_seq = session.last_of(TurnStart.TYPE)
    end_seq = session.last_of(TurnEnd.TYPE)
    if start_seq is None or (end_seq is not None and end_seq > start_seq):
        return None
    start = session.event(start_seq)
    assert isinstance(start, TurnStart)
    return start.turn, start_seq


def interrupted_turn_closers(session: Session) -> list[SessionEvent]:
    """The events that close the open turn of ``session`` (none when no turn is open)."""
    opened = open_turn_of(session)
    if opened is None:
        return []
    turn, start_seq = opened
    scan = _TurnScan(turn)
    for event in session.events(start_seq + 1):
        scan.feed(event)
    seq = len(session)
    time = session.event(seq - 1).time
    closers: list[SessionEvent] = []
    for pending in scan.pending.values():
        closers.append(_synthetic_result(turn, pending, seq + len(closers), time))
    if scan.step is not None:
        closers.append(StepEnd(turn=turn, step=scan.step, seq=seq + len(closers), time=time))
    reason = TurnEndReason(kind="interrupted")
    closers.append(TurnEnd(turn=turn, reason=reason, seq=seq + len(closers), time=time))
    return closers


def _synthetic_result(turn: int, pending: _Pending, seq: int, time: datetime) -> ToolResult:
    return interrupted_result(
        turn, pending.step, pending.call_id, pending.call_seq, seq, time=time, stamp=True
    )


def _answered(event: ToolResult) -> list[str]:
    ids = [b.tool_call_id for b in event.message.content if isinstance(b, ToolResultBlock)]
    if event.message.source.call_id:
        ids.append(event.message.source.call_id)
    return ids
