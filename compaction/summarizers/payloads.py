"""The provider request bodies, as pure functions of a :class:`SummaryRequest` and a model name.

    build_openai_payload       OpenAI chat completions (``/v1/chat/completions``)
    build_anthropic_payload    Anthropic messages (``/v1/messages``)
    build_payload              either, by request shape (what the audit calls)

The summarizers send exactly these bodies, and the audit rebuilds the body of a recorded
compaction with them, so this module imports no HTTP client: a process that only audits a log
never loads aiohttp.

OpenAI: the conversation's own system prompt and tools, the shadowed messages in the chat shape
(assistant ``tool_calls`` followed by their ``role: tool`` results), then the instruction as the
final user message; streamed with ``stream_options.include_usage``. Anthropic: ``system`` and
``tools``, the messages in the Anthropic shape (roles alternate; tool results lead the next user
message), the instruction merged into the final user turn, and a one-line user lead when the span
starts with an assistant turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from compaction.errors import CompactionConfigError
from compaction.sessions.blocks import Message, Source, TextBlock
from compaction.sessions.render import to_anthropic, to_openai
from compaction.vocabulary.instruction import INSTRUCTION_PLUGIN
from compaction.vocabulary.summarizer import SummaryRequest

JSON = dict[str, Any]
MaxTokensField = Literal["max_tokens", "max_completion_tokens"]
PayloadShape = Literal["openai", "anthropic"]
PAYLOAD_SHAPES: tuple[PayloadShape, ...] = ("openai", "anthropic")

CONTINUATION = "[the conversation continues from an earlier point]"
"""Leads the Anthropic messages when the span starts with an assistant turn (some endpoints
require a user message first)."""


def instruction_message(request: SummaryRequest) -> Message:
    """The single final user message carrying the instruction."""
    return Message(
        id=f"{request.compaction_id}/instruction",
        role="user",
        content=(TextBlock(request.instruction),),
        source=Source(kind="plugin", plugin=INSTRUCTION_PLUGIN, compaction_id=request.compaction_id),
    )


def tool_schema(parameters: Mapping[str, Any]) -> JSON:
    """A tool's JSON schema; an empty one becomes the empty object schema providers accept."""
    return dict(parameters) if parameters else {"type": "object", "properties": {}}


# ---------------------------------------------------------------- OpenAI chat completions


def build_openai_payload(
    request: SummaryRequest, model: str, *, max_tokens_field: MaxTokensField = "max_tokens"
) -> JSON:
    """The chat-completions body for ``request`` (pure: the audit rebuilds requests with it)."""
    messages = to_openai([*request.messages, instruction_message(request)], request.system)
    payload: JSON = {
        "model": model,
        "messages": [m for m in messages if not _empty_assistant(m)],
    }
    if request.tools:
        payload["tools"] = [_openai_tool(t.name, t.description, t.parameters) for t in request.tools]
    payload[max_tokens_field] = request.max_tokens
    payload["stream"] = True
    payload["stream_options"] = {"include_usage": True}
    return payload


def _empty_assistant(message: JSON) -> bool:
    """A reasoning-only assistant turn renders to no content and no calls; providers reject it."""
    return message["role"] == "assistant" and message.get("content") is None and not message.get("tool_calls")


def _openai_tool(name: str, description: str, parameters: dict[str, Any]) -> JSON:
    function: JSON = {"name": name}
    if description:
        function["description"] = description
    function["parameters"] = tool_schema(parameters)
    return {"type": "function", "function": function}


# ---------------------------------------------------------------- Anthropic messages


def build_anthropic_payload(request: SummaryRequest, model: str) -> JSON:
    """The messages body for ``request`` (pure: the audit rebuilds requests with it)."""
    messages = to_anthropic([*request.messages, instruction_message(request)])
    if messages[0]["role"] != "user":
        messages.insert(0, {"role": "user", "content": [{"type": "text", "text": CONTINUATION}]})
    payload: JSON = {"model": model, "max_tokens": request.max_tokens}
    if request.system:
        payload["system"] = request.system
    if request.tools:
        payload["tools"] = [_anthropic_tool(t.name, t.description, t.parameters) for t in request.tools]
    payload["messages"] = messages
    payload["stream"] = True
    return payload


def _anthropic_tool(name: str, description: str, parameters: dict[str, Any]) -> JSON:
    tool: JSON = {"name": name}
    if description:
        tool["description"] = description
    tool["input_schema"] = tool_schema(parameters)
    return tool


# ---------------------------------------------------------------- by shape


def build_payload(
    shape: str,
    request: SummaryRequest,
    model: str,
    *,
    max_tokens_field: MaxTokensField = "max_tokens",
) -> JSON:
    """The body of ``shape`` (``openai`` or ``anthropic``) for ``request``."""
    if shape == "openai":
        return build_openai_payload(request, model, max_tokens_field=max_tokens_field)
    if shape == "anthropic":
        return build_anthropic_payload(request, model)
    raise CompactionConfigError(
        f"no payload builder for request shape {shape!r}; expected one of {', '.join(PAYLOAD_SHAPES)}"
    )
