"""OpenAI-style chat messages into sessions: SWE-agent ``.traj``, mini-swe-agent, plain lists.

Accepted shapes: a JSON list of messages; a JSON object with a ``history`` (SWE-agent) or
``messages`` list; JSONL with one message per line; JSONL with one ``{messages: [...]}``
conversation per line (one session each, source ``FILE#run-N``).

* The first ``system`` (or ``developer``) message gives ``request/header.system`` (provider
  ``openai``; the model from ``replay_config.agent.model.name`` or ``model`` when the file says,
  else ``unknown``); a later one is a ``context/message``.
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
from compaction.importers.builder import SessionBuilder
from compaction.importers.content import image_block, model_source, text_of_content, user_message
from compaction.importers.format import LOOKAHEAD, TranscriptFormat
from compaction.importers.ids import file_digest, session_id_for
from compaction.importers.json_input import (
    JSON,
    as_dict,
    as_list,
    as_str,
    compact_json,
    json_lines,
    whole_document,
)
from compaction.importers.records import verbatim
from compaction.importers.result import ImportedSession
from compaction.sessions.blocks import Block, ImageBlock, Message, ReasoningBlock, TextBlock, ToolCallBlock

NAME = "openai"
PROVIDER = "openai"
Conversation = tuple[str, list[tuple[str, JSON]], JSON]  # (source, [(origin, message)], envelope)
SYSTEM_ROLES = frozenset({"system", "developer"})
"""The roles of a system prompt (``developer`` is its name for OpenAI's reasoning models)."""
CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")
"""The roles :func:`read_message` reads."""


def import_file(path: Path, data: bytes) -> list[ImportedSession]:
    digest = file_digest(data)
    conversations, skipped = _conversations(path, data)
    sessions = []
    for index, (source, messages, envelope) in enumerate(conversations):
        builder = SessionBuilder(session_id_for(NAME, digest, index), source=source, format=NAME)
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
    systems = [(o, m) for o, m in messages if m.get("role") in SYSTEM_ROLES]
    first_system = systems[0][0] if systems else None
    system_text = text_of_content(systems[0][1].get("content")) if systems else None
    b.header(PROVIDER, model, system=system_text, origin=first_system or "request envelope")
    text_actions = 0
    for origin, message in messages:
        if not b.first_time(origin, _message_key(message), message):
            continue
        role = as_str(message.get("role"))
        text_actions += role == "assistant" and "action" in message and not message.get("tool_calls")
        if not read_message(b, origin, message, model, header_system=origin == first_system):
            b.skip(origin, f"message with role {role!r}: not a chat message this importer knows")
    _describe(b, envelope, text_actions)


def read_message(
    b: SessionBuilder, origin: str, message: JSON, model: str, *, header_system: bool = False
) -> bool:
    """One chat message into ``b``, read as this importer reads it (the HTTP service's ``openai``
    items too): a system or developer message is context (nothing when ``header_system``: it is
    the ``request/header``'s system prompt), a user message a prompt, an assistant message a step
    with its tool calls (under ``model`` unless the message names one), a tool message the result of
    its call. False, with nothing recorded, for a message of another role."""
    role = message.get("role")
    if role in SYSTEM_ROLES:
        _system(b, origin, message, first=header_system)
    elif role == "user":
        _user(b, origin, message)
    elif role == "assistant":
        _assistant(b, origin, message, model)
    elif role == "tool":
        _tool(b, origin, message)
    else:
        return False
    return True


def _message_key(message: JSON) -> str | None:
    """A message carries no id of its own; one that carries tool call ids (a call or its answer)
    is told by its content, which those ids make unique. Any other message has no key: the same
    text twice may be two messages."""
    calls = [as_dict(c).get("id") for c in as_list(message.get("tool_calls"))]
    answers = [message.get("tool_call_id"), *as_list(message.get("tool_call_ids"))]
    return verbatim(message) if any(isinstance(i, str) and i for i in (*calls, *answers)) else None


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


ROLES = frozenset({*CHAT_ROLES, "function"})


def is_chat_message(value: Any) -> bool:
    return as_str(as_dict(value).get("role")) in ROLES


def _has_role(value: Any) -> bool:
    """A message of some role with chat content (a role this importer does not read is skipped
    with its reason, not a reason to refuse the file)."""
    record = as_dict(value)
    return isinstance(record.get("role"), str) and ("content" in record or "tool_calls" in record)


def recognises(value: Any) -> bool:
    """A list of chat messages, an object with a ``history`` holding one (SWE-agent) or a
    ``messages`` list, or one chat message (a JSONL line)."""
    if isinstance(value, list):
        head = value[:LOOKAHEAD]
        return bool(head) and all(map(_has_role, head)) and any(map(is_chat_message, head))
    record = as_dict(value)
    history = record.get("history")
    if isinstance(history, list):
        return any(is_chat_message(m) for m in history[:LOOKAHEAD])
    return isinstance(record.get("messages"), list) or is_chat_message(record)


FORMAT = TranscriptFormat(
    NAME,
    title="OpenAI-style chat messages, SWE-agent and mini-SWE-agent trajectories",
    looks_like="OpenAI-style chat messages (`role`/`content`, a SWE-agent `history`)",
    recognises=recognises,
    import_file=import_file,
    aliases=("swe-agent", "mini-swe-agent"),
)
