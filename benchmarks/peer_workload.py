"""The same message lists for every contender of ``bench_peers``: the public transcripts (spotter's
Claude Code session, pi-mono's large session) imported, their surface messages repeated (ids made
unique per copy) up to N messages, and ended on a balanced step.

This project gets them as a session (appended through the importers' :class:`SessionBuilder`, in
memory); the peers get them as LangChain messages (:func:`to_langchain`, in ``bench_peers``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import msgspec

from compaction.importers import import_path
from compaction.importers.builder import SessionBuilder
from compaction.sessions.blocks import Block, Message, TextBlock, ToolCallBlock, ToolResultBlock
from compaction.sessions.session import Session

TRANSCRIPTS = Path(__file__).resolve().parents[1] / "tests" / "data" / "transcripts"
SOURCES = {
    "spotter": TRANSCRIPTS / "spotter" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl",
    "pi": TRANSCRIPTS / "pi-mono" / "large-session.jsonl",
}


def base_messages(name: str) -> list[Message]:
    """Every message the transcript appended to the surface, in log order (its own compaction's
    replacement left out: the peers never saw it)."""
    session = import_path(SOURCES[name])[0].session
    found: list[Message] = []
    for event in session.events():
        if event.SURFACE and event.surface_op == "append":
            message: Message = event.message  # type: ignore[attr-defined]
            if message.content:
                found.append(message)
    return found


def scaled(messages: list[Message], count: int) -> list[Message]:
    """``count`` messages (fewer when the cut must move back to a closed step): copies of
    ``messages`` with every message and tool-call id suffixed by its copy number."""
    out: list[Message] = []
    copy = 0
    while len(out) < count:
        out.extend(_renamed(m, copy) for m in messages)
        copy += 1
    del out[count:]
    while out and _open_calls(out):
        out.pop()
    return out


def _renamed(message: Message, copy: int) -> Message:
    if copy == 0:
        return message
    suffix = f"~{copy}"
    content: list[Block] = []
    for block in message.content:
        if isinstance(block, ToolCallBlock):
            content.append(msgspec.structs.replace(block, id=block.id + suffix))
        elif isinstance(block, ToolResultBlock):
            content.append(msgspec.structs.replace(block, tool_call_id=block.tool_call_id + suffix))
        else:
            content.append(block)
    source = message.source
    if source.call_id is not None:
        source = msgspec.structs.replace(source, call_id=source.call_id + suffix)
    return msgspec.structs.replace(message, id=message.id + suffix, content=tuple(content), source=source)


def _open_calls(messages: list[Message]) -> bool:
    """Whether the tail of ``messages`` holds a call without its result."""
    pending: set[str] = set()
    for message in messages[-64:]:
        for block in message.content:
            if isinstance(block, ToolCallBlock):
                pending.add(block.id)
            elif isinstance(block, ToolResultBlock):
                pending.discard(block.tool_call_id)
    last = messages[-1]
    return bool(pending) or any(isinstance(b, ToolCallBlock) for b in last.content)


def results_of(message: Message) -> Iterator[ToolResultBlock]:
    for block in message.content:
        if isinstance(block, ToolResultBlock):
            yield block


def build_session(messages: list[Message]) -> Session:
    """The messages appended as a session (turns and steps as the importers build them)."""
    builder = SessionBuilder(uuid4(), source="bench", format="bench")
    for index, message in enumerate(messages):
        origin = f"message {index}"
        results = list(results_of(message))
        if message.role == "assistant":
            builder.assistant(message, origin)
        elif results:
            for block in results:
                builder.result(block.tool_call_id, block.content, origin, is_error=block.is_error)
        elif index == 0 or message.source.kind == "user":
            builder.user(message, origin)
        else:
            builder.context(message, origin)
    builder.close_turn("end")
    return builder.session


def text(message: Message) -> str:
    return "\n".join(b.text for b in message.content if isinstance(b, TextBlock))
