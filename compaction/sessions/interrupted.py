"""The synthetic answer to a tool call that never got a result (spec §d.16), in one place.

Crash repair (``recovery``), a cancelled step (``compaction.sessions.loop``) and importers (a transcript whose
call has no result) all answer the call with the same error result, marked ``synthesized``:
``ToolOutcomeUnknownError`` when a ``tool/call`` was recorded (citing it), else ``ToolNotStartedError``.
"""

from __future__ import annotations

from datetime import datetime

from compaction.sessions.blocks import Message, Source, TextBlock, ToolResultBlock
from compaction.sessions.events import UNSET_SEQ, UNSET_TIME, ToolError, ToolResult

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
