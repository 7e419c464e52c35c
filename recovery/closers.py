"""Interrupted-turn closers: the events that close a turn its process left open.

A pure function over a loaded log. The scan of the open turn and the closers themselves are
:mod:`compaction.sessions.interrupted`'s (the agent loop closes a cancelled turn with the same
ones). If no turn is open there is nothing to close. Otherwise, with seqs continuing after the last
event and ``time`` = the last event's time:

1. one synthetic ``tool/result`` per still-pending call, in registration order (``error``
   ``ToolOutcomeUnknownError`` / ``TOOL_OUTCOME_UNKNOWN`` when a ``tool/call`` was recorded and then
   ``source_event_seqs = [that seq]``, else ``ToolNotStartedError`` / ``TOOL_NOT_STARTED``);
2. ``step/end`` if a step is open;
3. ``turn/end {reason: interrupted}``.
"""

from __future__ import annotations

from compaction.sessions.events import SessionEvent, TurnEndReason
from compaction.sessions.interrupted import turn_closers
from compaction.sessions.session import Session


def interrupted_turn_closers(session: Session) -> list[SessionEvent]:
    """The events that close the open turn of ``session`` (none when no turn is open)."""
    if len(session) == 0:
        return []
    time = session.event(len(session) - 1).time
    return turn_closers(session, TurnEndReason(kind="interrupted"), time=time)
