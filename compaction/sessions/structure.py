"""Turn and step structure (docs/sessions.md, "Turns and steps"): turns numbered in order, steps
inside turns, tool results answering a pending call of the same step.

:class:`Structure` is a small mutable fold; :meth:`check` validates without mutating and
:meth:`apply` commits. Its state round-trips through :class:`StructureState` for snapshots.
"""

from __future__ import annotations

import msgspec

from compaction.errors import StructureRuleError
from compaction.sessions.blocks import ToolResultBlock
from compaction.sessions.events import (
    AssistantChunk,
    AssistantMessage,
    Replace,
    RequestHeader,
    SessionEvent,
    StepEnd,
    StepStart,
    ToolCall,
    ToolResult,
    TurnEnd,
    TurnStart,
)

NOT_STARTED = "TOOL_NOT_STARTED"


class StructureState(msgspec.Struct, frozen=True):
    open_turn: int | None = None
    open_step: int | None = None
    next_turn: int = 1
    next_step: int = 1
    pending_calls: tuple[str, ...] = ()


class Structure:
    __slots__ = ("next_step", "next_turn", "open_step", "open_turn", "pending")

    def __init__(self, state: StructureState | None = None) -> None:
        state = state or StructureState()
        self.open_turn = state.open_turn
        self.open_step = state.open_step
        self.next_turn = state.next_turn
        self.next_step = state.next_step
        self.pending: dict[str, None] = dict.fromkeys(state.pending_calls)

    def state(self) -> StructureState:
        return StructureState(
            self.open_turn, self.open_step, self.next_turn, self.next_step, tuple(self.pending)
        )

    def copy(self) -> Structure:
        return Structure(self.state())

    # ------------------------------------------------------------ rules

    def check(self, event: SessionEvent) -> None:  # one branch per event type
        seq = event.seq
        if isinstance(event, TurnStart):
            if self.open_turn is not None:
                _fail(seq, f"turn/start {event.turn} while turn {self.open_turn} is still open")
            if event.turn != self.next_turn:
                _fail(seq, f"turn/start expected turn {self.next_turn}, got {event.turn}")
        elif isinstance(event, TurnEnd):
            if event.turn != self.open_turn:
                _fail(seq, f"turn/end {event.turn} does not match open turn {_n(self.open_turn)}")
            if self.open_step is not None:
                _fail(seq, f"turn/end {event.turn} while step {self.open_step} is still open")
        elif isinstance(event, StepStart):
            if event.turn != self.open_turn:
                _fail(seq, f"step/start in turn {event.turn} but open turn is {_n(self.open_turn)}")
            if self.open_step is not None:
                _fail(seq, f"step/start {event.step} while step {self.open_step} is still open")
            if event.step != self.next_step:
                _fail(
                    seq,
                    f"step/start expected step {self.next_step} in turn {event.turn}, got {event.step}",
                )
        elif isinstance(event, (StepEnd, AssistantChunk, AssistantMessage, ToolCall)):
            self._require_step(event.TYPE, seq, event.turn, event.step)
        elif isinstance(event, ToolResult):
            self._check_tool_result(event)
        elif isinstance(event, RequestHeader) and self.open_turn is None:
            _fail(
                seq,
                "request/header appended outside any open turn (core execution events must be turn-enclosed)",
            )

    def _check_tool_result(self, event: ToolResult) -> None:
        seq = event.seq
        if isinstance(event.surface_op, Replace):
            # A content rewrite (pruning) is maintenance: allowed inside or between turns.
            # (The reference's invariant companion requires an open turn; see docs/sessions.md.)
            return
        self._require_step(event.TYPE, seq, event.turn, event.step)
        call_id = event.message.source.call_id or ""
        head = event.message.content[0] if event.message.content else None
        not_started = (
            event.error is not None
            and event.error.code == NOT_STARTED
            and isinstance(head, ToolResultBlock)
            and head.is_error
        )
        if call_id not in self.pending and not not_started:
            _fail(seq, f"tool/result for {call_id} with no prior tool/call in this step")

    def _require_step(self, kind: str, seq: int, turn: int, step: int) -> None:
        if turn != self.open_turn or step != self.open_step:
            _fail(
                seq,
                f"{kind} names turn {turn}/step {step} but open is turn {_n(self.open_turn)}/step "
                f"{_n(self.open_step)}",
            )

    def apply(self, event: SessionEvent) -> None:
        if isinstance(event, TurnStart):
            self.open_turn = event.turn
            self.open_step = None
            self.next_step = 1
            self.pending.clear()
        elif isinstance(event, TurnEnd):
            self.open_turn = None
            self.next_turn = event.turn + 1
            self.pending.clear()
        elif isinstance(event, StepStart):
            self.open_step = event.step
        elif isinstance(event, StepEnd):
            self.open_step = None
            self.next_step = event.step + 1
            self.pending.clear()
        elif isinstance(event, ToolCall):
            self.pending[event.call_id] = None
        elif isinstance(event, ToolResult) and not isinstance(event.surface_op, Replace):
            self.pending.pop(event.message.source.call_id or "", None)


def _n(value: int | None) -> str:
    return "null" if value is None else str(value)


def _fail(seq: int, message: str) -> None:
    raise StructureRuleError("structure", seq, f"{message} (seq {seq})")
