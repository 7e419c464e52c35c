"""What a client appends, in the provider shapes agents already speak, recorded as session events.

Three formats, each read by the parser the library already has for it:

- ``openai``: chat-completions messages (``system``/``developer``, ``user``, ``assistant`` with
  ``tool_calls``, ``tool`` with ``tool_call_id``), read message by message by the OpenAI-chat
  importer's reader (:func:`compaction.importers.openai_chat.read_message`);
- ``anthropic``: messages with ``text``, ``thinking``, ``image``, ``tool_use`` and ``tool_result``
  blocks, each block read by the Anthropic block readers the Claude Code importer uses
  (:mod:`compaction.importers.anthropic_blocks`);
- ``responses``: Responses API input items (``message``, ``reasoning``, ``function_call``,
  ``function_call_output``, anything else kept opaque), read by the Agents SDK adapter
  (:func:`compaction.integrations.openai_agents.from_items`).

Everything is recorded by one :class:`~compaction.integrations.memory.LiveRecorder` continuing the
stored session (its open turn, open step and pending calls read back from the log), so the
turn/step/tool-call rules are the reference loop's. A request is all or nothing: the first item the
recorder refuses (a tool result without its call, an unknown role, a block type no reader knows)
raises, and the caller drops every event the request appended.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import msgspec

from compaction.errors import BadRequestError, IntegrationError
from compaction.importers import openai_chat
from compaction.importers.anthropic_blocks import assistant_block, content_parts, result_content, user_block
from compaction.importers.content import model_source, user_message
from compaction.integrations.memory import AssistantItem, Item, LiveRecorder, ResultItem, UserItem
from compaction.integrations.openai_agents import from_items
from compaction.sessions.blocks import Block, Message, ToolCallBlock
from compaction.sessions.session import Session

Format = Literal["openai", "anthropic", "responses"]
FORMATS: tuple[Format, ...] = ("openai", "anthropic", "responses")
PROVIDER_OF: dict[Format, str] = {"openai": "openai", "anthropic": "anthropic", "responses": "openai"}


def record(session: Session, format: Format, items: Sequence[Any], origin: str) -> int:
    """Append ``items`` (of ``format``) to ``session`` as events; returns how many were appended.
    Raises :class:`BadRequestError` or :class:`IntegrationError` on the first item that cannot be
    recorded (the session then holds unsaved events the caller must drop)."""
    before = len(session)
    header = session.latest_header()
    model = header.model if header is not None else "unknown"
    recorder = LiveRecorder(session, source=f"serve:{session.id}", format="serve", model=model)
    if header is not None:
        recorder.header(
            header.provider, header.model, system=header.system, tools=header.tools, origin=origin
        )
    objects = [_object(item, f"{origin} item {index}") for index, item in enumerate(items)]
    if format == "openai":
        ends_turn = _record_chat(recorder, objects, origin, model)
    else:
        found = (
            _anthropic(objects, origin, model)
            if format == "anthropic"
            else _responses(objects, origin, model)
        )
        for index, item in enumerate(found):
            recorder.record(item, f"{origin} item {index}")
        ends_turn = bool(found) and isinstance(found[-1], AssistantItem) and not _calls(found[-1].message)
    recorder.settle(None, f"{origin} (settled)")
    if ends_turn:
        recorder.close_turn(f"{origin} (the model answered without tool calls)")
    return len(session) - before


def _object(item: Any, where: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise BadRequestError(f"{where}: expected a JSON object; found {type(item).__name__}")
    return item


def _calls(message: Message) -> bool:
    return any(isinstance(block, ToolCallBlock) for block in message.content)


# ---------------------------------------------------------------- OpenAI chat messages


def _record_chat(recorder: LiveRecorder, messages: list[dict[str, Any]], origin: str, model: str) -> bool:
    """The chat messages through the OpenAI-chat importer's reader (a system or developer message
    is context: the session's system prompt is its header's); a tool message the recorder skips (no
    pending call) fails the whole request. True when the last message is a model answer without tool
    calls (the turn ends)."""
    for index, message in enumerate(messages):
        where = f"{origin} item {index}"
        if not openai_chat.read_message(recorder, where, message, model):
            roles = ", ".join(openai_chat.CHAT_ROLES)
            raise BadRequestError(
                f"{where}: expected a chat message with role {roles}; found role {message.get('role')!r}"
            )
        if recorder.skipped:
            raise IntegrationError(
                f"session {recorder.session.id}: {recorder.skipped[0]}; expected a tool message to "
                "answer a pending tool call of the open step; nothing of this request was stored"
            )
    last = messages[-1] if messages else {}
    return last.get("role") == "assistant" and not last.get("tool_calls")


# ---------------------------------------------------------------- Anthropic messages


def _anthropic(messages: list[dict[str, Any]], origin: str, model: str) -> list[Item]:
    items: list[Item] = []
    for index, message in enumerate(messages):
        where = f"{origin} item {index}"
        role = message.get("role")
        parts = [_object(p, f"{where} block") for p in content_parts(message.get("content"))]
        if role == "assistant":
            blocks = [_block(assistant_block(p), p, where) for p in parts]
            source = model_source("anthropic", str(message.get("model") or model))
            items.append(
                AssistantItem(Message(id=where, role="assistant", content=tuple(blocks), source=source))
            )
        elif role == "user":
            items.extend(_anthropic_user(parts, where))
        else:
            raise BadRequestError(
                f"{where}: expected an Anthropic message with role user or assistant; found {role!r}"
            )
    return items


def _anthropic_user(parts: list[dict[str, Any]], where: str) -> list[Item]:
    """A user message: its ``tool_result`` blocks answer their calls; the rest is a prompt."""
    items: list[Item] = []
    prompt: list[Block] = []
    for index, part in enumerate(parts):
        if part.get("type") == "tool_result":
            content = result_content(part.get("content"))
            call_id = str(part.get("tool_use_id", ""))
            items.append(
                ResultItem(call_id, content, f"{where} block {index}", is_error=part.get("is_error") is True)
            )
        else:
            prompt.append(_block(user_block(part), part, where))
    if prompt:
        items.append(UserItem(user_message(where, tuple(prompt))))
    return items


def _block(block: Block | None, part: dict[str, Any], where: str) -> Block:
    if block is None:
        raise BadRequestError(
            f"{where}: a content block of type {part.get('type')!r} is not one this service reads"
        )
    return block


# ---------------------------------------------------------------- Responses items


def _responses(items: list[dict[str, Any]], origin: str, model: str) -> list[Item]:
    """The Agents SDK adapter's reading, each model response under the session's model."""
    found = from_items(items, origin)
    source = model_source(PROVIDER_OF["responses"], model)
    return [
        AssistantItem(msgspec.structs.replace(item.message, source=source))
        if isinstance(item, AssistantItem)
        else item
        for item in found
    ]
