"""OpenAI-style chat messages into sessions: SWE-agent ``.traj``, mini-swe-agent, plain lists.

Accepted shapes: a JSON list of messages; a JSON object with a ``history`` (SWE-agent) or
``messages`` list; JSONL with one message per line; JSONL with one ``{messages: [...]}``
conversation per line (one session each, source ``FILE#run-N``).

* ``system`` messages give ``request/header.system`` (provider ``openai``; the model from
  ``replay_config.agent.model.name`` or ``model`` when the file says, else ``unknown``).
* Every ``user`` message opens a turn; a SWE-agent demonstration (``is_demo``) is a
  ``context/message`` so the task statement stays the session's first user message.
* Each ``assistant`` message is one step; its ``tool_calls`` are its tool calls. Agents that write
  actions as text (SWE-agent without function calling, mini-swe-agent) have no ``tool_calls``: the
  step has no tool calls and the observation that follows is the next user message.
* ``tool`` messages answer ``tool_call_id`` (or each of SWE-agent's ``tool_call_ids``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from compaction.errors import TranscriptError
from compaction.sessions.blocks import Block, ImageBlock, Message, ReasoningBlock, TextBlock, ToolCallBlock
from compaction.sessions.importers.builder import SessionBuilder
from compaction.sessions.importers.common import (
    JSON,
    ImportedSession,
    as_dict,
    as_list,
    as_str,
    compact_json,
    file_digest,
    image_block,
    json_lines,
    model_source,
    session_id_for,
    text_of_content,
    user_message,
    whole_document,
)

FORMAT = "openai"
PROVIDER = "openai"
Conversation = tuple[str, list[tuple[str, JSON]], JSON]  # (source, [(origin, message)], envelope)


def import_file(path: Path, data: bytes) -> list[ImportedSession]:
    digest = file_digest(data)
    conversations, skipped = _conversations(path, data)
    sessions = []
    for index, (source, messages, envelope) in enumerate(conversations):
        builder = SessionBuilder(session_id_for(FORMAT, digest, index), source=source, format=FORMAT)
        builder.skipped.extend(skipped if index == 0 else ())
        _import_messages(builder, messages, envelope)
        sessions.append(builder.finish())
    return sessions


def _conversations(path: Path, data: bytes) -> tuple[list[Conversation], list[str]]:
    document = whole_document(data)
    if document is not None:
        return [_from_document(path, document)], []
    lines, skipped = json_lines(path, data)
    if lines and all(isinstance(d.get("messages"), list) for _, d in lines):
        return [
            (f"{path}#run-{k}", _indexed(d["messages"], f"line {n} messages"), d)
            for k, (n, d) in enumerate(lines, start=1)
        ], skipped
    return [(str(path), [(f"line {n}", d) for n, d in lines], {})], skipped


def _from_document(path: Path, document: Any) -> Conversation:
    if isinstance(document, list):
        return str(path), _indexed(document, "message"), {}
    envelope = as_dict(document)
    for key in ("history", "messages"):
        if isinstance(envelope.get(key), list):
            return str(path), _indexed(envelope[key], key), envelope
    raise TranscriptError(
        str(path),
        None,
        "expected a list of chat messages or an object with a `history` or `messages` list",
    )


def _indexed(messages: list[Any], label: str) -> list[tuple[str, JSON]]:
    return [(f"{label}[{i}]", as_dict(m)) for i, m in enumerate(messages)]


# ---------------------------------------------------------------- messages


def _import_messages(b: SessionBuilder, messages: list[tuple[str, JSON]], envelope: JSON) -> None:
    model = _model(envelope)
    systems = [(o, m) for o, m in messages if m.get("role") == "system"]
    first_system = systems[0][0] if systems else None
    system_text = text_of_content(systems[0][1].get("content")) if systems else None
    b.header(PROVIDER, model, system=system_text, origin=first_system or "request envelope")
    text_actions = 0
    for origin, message in messages:
        role = as_str(message.get("role"))
        if role == "system":
            _system(b, origin, message, first=origin == first_system)
        elif role == "user":
            _user(b, origin, message)
        elif role == "assistant":
            text_actions += "action" in message and not message.get("tool_calls")
            _assistant(b, origin, message, model)
        elif role == "tool":
            _tool(b, origin, message)
        else:
            b.skip(origin, f"message with role {role!r}: not a chat message this importer knows")
    _describe(b, envelope, text_actions)


def _system(b: SessionBuilder, origin: str, message: JSON, *, first: bool) -> None:
    if first:
        return  # it is request/header.system
    b.context(
        user_message(origin, (TextBlock(text_of_content(message.get("content"))),)),
        f"{origin} system",
    )
    b.note(f"{origin}: a later system message imported as a context message")


def _user(b: SessionBuilder, origin: str, message: JSON) -> None:
    blocks = _content_blocks(message.get("content"))
    if message.get("is_demo"):
        b.context(user_message(origin, blocks), f"{origin} demonstration")
        b.note(f"{origin}: demonstration (is_demo) imported as a context message")
    else:
        b.user(user_message(origin, blocks), origin)


def _assistant(b: SessionBuilder, origin: str, message: JSON, model: str) -> None:
    blocks: list[Block] = []
    reasoning = as_str(message.get("reasoning_content"))
    if reasoning:
        blocks.append(ReasoningBlock(reasoning))
    blocks.extend(_content_blocks(message.get("content")))
    for index, raw in enumerate(as_list(message.get("tool_calls"))):
        call = as_dict(raw)
        function = as_dict(call.get("function"))
        arguments = function.get("arguments", "")
        blocks.append(
            ToolCallBlock(
                id=as_str(call.get("id")) or f"{origin}-call-{index}",
                name=as_str(function.get("name")),
                arguments=arguments if isinstance(arguments, str) else compact_json(arguments),
            )
        )
    source = model_source(PROVIDER, as_str(message.get("model")) or model)
    b.assistant(Message(id=origin, role="assistant", content=tuple(blocks), source=source), origin)


def _tool(b: SessionBuilder, origin: str, message: JSON) -> None:
    ids = [as_str(i) for i in as_list(message.get("tool_call_ids"))] or [as_str(message.get("tool_call_id"))]
    content = tuple(_content_blocks(message.get("content")))
    for index, call_id in enumerate(ids):
        message_id = origin if len(ids) == 1 else f"{origin}-{index}"
        b.result(call_id, content, origin, message_id=message_id)
    if len(ids) > 1:
        b.note(f"{origin}: one tool message answers {len(ids)} calls; its content is repeated per call")


def _content_blocks(content: Any) -> tuple[TextBlock | ImageBlock, ...]:
    if isinstance(content, str):
        return (TextBlock(content),)
    blocks: list[TextBlock | ImageBlock] = []
    for raw in as_list(content):
        part = as_dict(raw)
        if part.get("type") == "image_url":
            url = as_str(as_dict(part.get("image_url")).get("url"))
            head, _, data = url.partition(",")
            media = head.removeprefix("data:").split(";")[0] if data else "image"
            blocks.append(image_block(data or url, media))
        else:
            blocks.append(TextBlock(as_str(part.get("text"))))
    return tuple(blocks)


def _model(envelope: JSON) -> str:
    agent_model = as_dict(as_dict(as_dict(envelope.get("replay_config")).get("agent")).get("model"))
    return as_str(agent_model.get("name")) or as_str(envelope.get("model")) or "unknown"


def _describe(b: SessionBuilder, envelope: JSON, text_actions: int) -> None:
    if text_actions:
        b.note(
            f"{text_actions} assistant messages carry actions written as text (no tool_calls): "
            "imported as steps without tool calls; their observations are user messages"
        )
    for key, value in envelope.items():
        if key in ("history", "messages"):
            continue
        size = f" ({len(value)} entries)" if isinstance(value, (list, dict)) else ""
        b.note(f"top-level `{key}`{size} not imported (run metadata, not conversation)")
