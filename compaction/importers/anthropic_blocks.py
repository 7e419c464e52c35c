"""Anthropic Messages content blocks into this library's blocks.

Claude Code transcripts and the Anthropic Messages API write a message's ``content`` the same way:
a string, or a list of typed blocks (``text``, ``thinking``, ``redacted_thinking``, ``tool_use``
in an assistant message; ``text``, ``image``, ``tool_result`` in a user message). These readers are
shared by the Claude Code importer and the HTTP service's ``anthropic`` items, so both read a block
the same way. A block type a reader does not know is ``None``: the caller decides whether that is
skipped (the importer) or refused (the service).
"""

from __future__ import annotations

from typing import Any

from compaction.importers.content import image_block
from compaction.importers.json_input import JSON, as_dict, as_list, as_str, compact_json
from compaction.sessions.blocks import Block, ImageBlock, ReasoningBlock, TextBlock, ToolCallBlock


def content_parts(content: Any) -> list[Any]:
    """A message's content as a list of blocks: a string is one ``text`` block."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return as_list(content)


def assistant_block(part: JSON) -> Block | None:
    """An assistant block: text, reasoning (``thinking``; ``redacted_thinking`` as a placeholder)
    or a tool call (``tool_use``, its ``input`` as compact JSON arguments); ``None`` for any other."""
    kind = part.get("type")
    if kind == "text":
        return TextBlock(as_str(part.get("text")))
    if kind == "thinking":
        return ReasoningBlock(as_str(part.get("thinking")))
    if kind == "redacted_thinking":
        return ReasoningBlock("[redacted thinking]")
    if kind == "tool_use":
        return ToolCallBlock(
            id=as_str(part.get("id")),
            name=as_str(part.get("name")),
            arguments=compact_json(part.get("input", {})),
        )
    return None


def user_block(part: JSON) -> TextBlock | ImageBlock | None:
    """A user block: text or a base64 image; ``None`` for any other (``tool_result`` included)."""
    kind = part.get("type")
    if kind == "text":
        return TextBlock(as_str(part.get("text")))
    if kind == "image":
        source = as_dict(part.get("source"))
        return image_block(as_str(source.get("data")), as_str(source.get("media_type")))
    return None


def result_content(content: Any) -> tuple[TextBlock | ImageBlock, ...]:
    """A ``tool_result`` block's content: a string, or text and image blocks (any other block kept
    as its compact JSON text)."""
    if isinstance(content, str):
        return (TextBlock(content),)
    blocks: list[TextBlock | ImageBlock] = []
    for raw in as_list(content):
        part = as_dict(raw)
        block = user_block(part)
        blocks.append(block if block is not None else TextBlock(compact_json(part)))
    return tuple(blocks)
