"""Hand-made span messages for the tests of the handover facts and of the template checkpoint."""

from __future__ import annotations

import itertools
import json

from compaction.sessions.blocks import Message, Source, TextBlock, ToolCallBlock, ToolResultBlock
from tests.builders import MODEL

_ids = itertools.count()


def user(text: str) -> Message:
    return Message(id=f"u{next(_ids)}", role="user", content=(TextBlock(text),))


def agent(text: str = "", *calls: ToolCallBlock) -> Message:
    blocks = ((TextBlock(text),) if text else ()) + calls
    return Message(id=f"a{next(_ids)}", role="assistant", content=blocks, source=MODEL)


def call(call_id: str, name: str, **arguments: object) -> ToolCallBlock:
    return ToolCallBlock(id=call_id, name=name, arguments=json.dumps(arguments))


def result(call_id: str, text: str, *, error: bool = False) -> Message:
    block = ToolResultBlock(tool_call_id=call_id, content=(TextBlock(text),), is_error=error)
    return Message(
        id=f"r{next(_ids)}", role="user", content=(block,), source=Source(kind="tool", call_id=call_id)
    )


def step(call_id: str, name: str, text: str, *, error: bool = False, **arguments: object) -> list[Message]:
    """An assistant message with one call, and the call's result."""
    return [agent("", call(call_id, name, **arguments)), result(call_id, text, error=error)]
