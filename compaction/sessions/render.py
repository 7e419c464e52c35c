"""Provider shapes of derived messages: OpenAI chat, Anthropic messages, and plain text.

OpenAI: an assistant message carries ``tool_calls``; each tool result is its own ``role: tool``
message, right after it (a user-role message between a call and its result is held back until the
results are out). Anthropic: roles alternate, so consecutive same-role messages merge; tool results
become ``tool_result`` blocks at the front of the next user message; empty text is never sent.
Reasoning is not sent back in either shape (providers require signed reasoning blocks we do not
have). Images are metadata only, so they render as tagged text placeholders.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from compaction.sessions.blocks import (
    Block,
    ImageBlock,
    Message,
    OpaqueBlock,
    ReasoningBlock,
    ResultPart,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)

Shape = Literal["openai", "anthropic", "text"]
JSON = dict[str, Any]


def image_placeholder(block: ImageBlock) -> str:
    size = f" {block.width}x{block.height}" if block.width and block.height else ""
    return f"[image {block.attachment_id} {block.media_type}{size}]"


def _plain(blocks: tuple[Block, ...] | tuple[ResultPart, ...]) -> str:
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif isinstance(block, ImageBlock):
            parts.append(image_placeholder(block))
    return "\n".join(parts)


# ---------------------------------------------------------------- OpenAI chat completions


def to_openai(messages: list[Message], system: str | None = None) -> list[JSON]:
    """OpenAI requires the ``tool`` messages to follow their assistant message directly, so a
    user-role message that sits between a call and its result on the surface (injected context,
    steering; the pairing balance allows it) is held back until the step's calls are answered, as the
    Anthropic shape does by leading the merged user message with the ``tool_result`` blocks."""
    out: list[JSON] = [{"role": "system", "content": system}] if system else []
    unanswered: set[str] = set()
    held: list[JSON] = []  # user-role items waiting for the open calls' results
    for message in messages:
        for item in _openai_message(message):
            role = item["role"]
            if role == "tool":
                out.append(item)
                unanswered.discard(item["tool_call_id"])
                if not unanswered:
                    out.extend(held)
                    held.clear()
            elif role != "assistant" and unanswered:
                held.append(item)
            else:
                out.extend(held)  # an assistant message before every result: keep log order
                held.clear()
                out.append(item)
                unanswered = {c["id"] for c in item.get("tool_calls", ())}
    out.extend(held)
    return out


def _openai_message(message: Message) -> list[JSON]:
    results = [b for b in message.content if isinstance(b, ToolResultBlock)]
    if results:
        rendered: list[JSON] = [
            {"role": "tool", "tool_call_id": r.tool_call_id, "content": _plain(r.content)} for r in results
        ]
        rest = _plain(tuple(b for b in message.content if not isinstance(b, ToolResultBlock)))
        if rest:
            rendered.append({"role": "user", "content": rest})
        return rendered
    if message.role == "assistant":
        calls = [b for b in message.content if isinstance(b, ToolCallBlock)]
        item: JSON = {"role": "assistant", "content": _plain(message.content) or None}
        if calls:
            item["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in calls
            ]
        return [item]
    return [{"role": message.role, "content": _plain(message.content)}]


# ---------------------------------------------------------------- Anthropic messages


def to_anthropic(messages: list[Message]) -> list[JSON]:
    out: list[JSON] = []
    for message in messages:
        role = "assistant" if message.role == "assistant" else "user"
        blocks = [_anthropic_block(b) for b in message.content]
        blocks = [b for b in blocks if b is not None]
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            merged = out[-1]["content"] + blocks
            # tool_result blocks must lead a user message
            merged.sort(key=lambda b: 0 if b["type"] == "tool_result" else 1)
            out[-1]["content"] = merged
        else:
            out.append({"role": role, "content": blocks})
    return out


def _anthropic_block(block: Block) -> JSON | None:
    if isinstance(block, TextBlock):
        # Anthropic rejects empty and whitespace-only text blocks
        return {"type": "text", "text": block.text} if block.text.strip() else None
    if isinstance(block, (ReasoningBlock, OpaqueBlock)):
        return None  # a framework's own item: only that framework can send it
    if isinstance(block, ImageBlock):
        return {"type": "text", "text": image_placeholder(block)}
    if isinstance(block, ToolCallBlock):
        return {
            "type": "tool_use",
            "id": block.id,
            "name": block.name,
            "input": parse_arguments(block.arguments),
        }
    result: JSON = {"type": "tool_result", "tool_use_id": block.tool_call_id}
    text = _plain(block.content)
    if text.strip():  # an empty result is sent without content (empty text blocks are rejected)
        result["content"] = [{"type": "text", "text": text}]
    if block.is_error:
        result["is_error"] = True
    return result


def parse_arguments(arguments: str) -> JSON:
    """Tool arguments as an object; a non-object or invalid JSON string is kept under ``_raw``."""
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return {"_raw": arguments}
    return value if isinstance(value, dict) else {"_raw": arguments}


# ---------------------------------------------------------------- text


def to_text(messages: list[Message]) -> str:
    lines: list[str] = []
    for message in messages:
        lines.append(f"--- {message.role} ({message.id})")
        for block in message.content:
            lines.append(_text_block(block))
    return "\n".join(lines)


def _text_block(block: Block) -> str:
    if isinstance(block, TextBlock):
        return block.text
    if isinstance(block, ReasoningBlock):
        return f"[reasoning] {block.text}"
    if isinstance(block, ImageBlock):
        return image_placeholder(block)
    if isinstance(block, OpaqueBlock):
        return f"[{block.framework} {block.kind}] {block.text}"
    if isinstance(block, ToolCallBlock):
        return f"[tool-call {block.id}] {block.name}({block.arguments})"
    flag = " error" if block.is_error else ""
    parts = "\n".join(_text_block(b) for b in block.content)
    return f"[tool-result {block.tool_call_id}{flag}] {parts}"


def render(messages: list[Message], shape: Shape) -> list[JSON] | str:
    if shape == "openai":
        return to_openai(messages)
    if shape == "anthropic":
        return to_anthropic(messages)
    return to_text(messages)


# ---------------------------------------------------------------- provider validity


def pairing_problems(messages: list[Message]) -> list[str]:
    """Provider-level pairing problems: every tool call answered exactly once, after it, and no
    result without its call. Empty when the history is valid for both providers."""
    problems: list[str] = []
    open_calls: dict[str, str] = {}
    answered: set[str] = set()
    for message in messages:
        if message.role == "assistant" and open_calls:
            problems.extend(f"tool call {c} unanswered before the next assistant message" for c in open_calls)
            open_calls.clear()
        for block in message.content:
            if isinstance(block, ToolCallBlock):
                if block.id in open_calls or block.id in answered:
                    problems.append(f"tool call id {block.id} repeats (message {message.id})")
                open_calls[block.id] = message.id
            elif isinstance(block, ToolResultBlock):
                if block.tool_call_id in answered:
                    problems.append(f"tool call {block.tool_call_id} answered twice")
                elif block.tool_call_id not in open_calls:
                    problems.append(
                        f"tool result for {block.tool_call_id} has no earlier call (message {message.id})"
                    )
                else:
                    del open_calls[block.tool_call_id]
                    answered.add(block.tool_call_id)
    problems.extend(f"tool call {c} (message {m}) never answered" for c, m in open_calls.items())
    return problems
