"""pi coding-agent session JSONL into sessions.

A ``session`` header line, then entries: ``message`` (roles ``user``, ``assistant`` with ``text`` /
``thinking`` / ``toolCall`` blocks, ``toolResult`` with ``toolCallId``), ``model_change``,
``thinking_level_change`` and ``compaction`` (``summary``, ``firstKeptEntryIndex``).

* Each assistant message is one step. Its provider/model ride on the message, so a switch of model
  shows as a ``request/header`` with reason ``change`` before the step that used it.
* An assistant message that stopped with ``error`` or ``aborted`` never ran its tool calls: no
  ``tool/call`` is recorded and each call gets a synthesized ``ToolNotStartedError`` result; the
  turn ends with that reason. (A call the file nevertheless answers gets its ``tool/call`` right
  before that result, and a note.)
* A ``compaction`` entry is counted and becomes a compaction bracket (a
  :class:`~compaction.engine.foreign.ForeignCompaction`) replacing the entries before its first kept one.
* A ``bashExecution`` message (a command the user ran with ``!``) is user text, rendered as pi
  renders it for the model (``bashExecutionToText``); with ``excludeFromContext`` (``!!``) pi keeps
  it out of the model's context, so it is reported as skipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from compaction.engine.foreign import ForeignCompaction
from compaction.importers.builder import SessionBuilder
from compaction.importers.content import image_block, model_source, user_message
from compaction.importers.format import TranscriptFormat
from compaction.importers.ids import file_digest, session_id_for
from compaction.importers.json_input import (
    JSON,
    as_dict,
    as_int,
    as_list,
    as_str,
    compact_json,
    json_lines,
)
from compaction.importers.records import record_id, timestamped
from compaction.importers.result import ImportedSession
from compaction.sessions.blocks import Block, ImageBlock, Message, ReasoningBlock, TextBlock, ToolCallBlock
from compaction.sessions.events import TurnEndKind, TurnEndReason, Usage

NAME = "pi"
STOPPED: dict[str, TurnEndKind] = {"error": "error", "aborted": "aborted"}


def import_file(path: Path, data: bytes) -> list[ImportedSession]:
    lines, truncated = json_lines(path, data)
    builder = SessionBuilder(session_id_for(NAME, file_digest(data), 0), source=str(path), format=NAME)
    builder.skipped.extend(truncated)
    entry_seqs: dict[str, int] = {}
    for index, (number, line) in enumerate(lines):
        entry_seqs[f"index:{index}"] = len(builder.session)  # counts every entry, repeats too
        key = record_id("id", line.get("id")) or timestamped(line)
        if not builder.first_time(f"line {number}", key, line):
            continue
        builder.at(builder.time_of(line.get("timestamp"), f"line {number}"))
        if isinstance(line.get("id"), str):
            entry_seqs[f"id:{line['id']}"] = len(builder.session)
        if as_str(line.get("type")) == "compaction":
            _compaction(builder, f"line {number}", line, entry_seqs)
        else:
            _entry(builder, number, line)
    return [builder.finish()]


def _entry(b: SessionBuilder, number: int, line: JSON) -> None:
    kind = as_str(line.get("type"))
    origin = f"line {number}"
    if kind == "message":
        _message(b, origin, as_dict(line.get("message")))
    elif kind == "session":
        b.skip(
            origin,
            f"session header (id {line.get('id')}, cwd {line.get('cwd')}): provider and "
            "model go to request/header from each assistant message",
        )
    elif kind == "model_change":
        b.skip(
            origin,
            f"model change to {line.get('provider')}/{line.get('modelId')}: recorded as a "
            "request/header change before the next assistant message that uses it",
        )
    elif kind == "thinking_level_change":
        b.skip(
            origin,
            f"thinking level change to {line.get('thinkingLevel')!r}: no session event for it",
        )
    else:
        b.skip(origin, f"{kind or 'untyped'} entry: not a conversation message")


def _message(b: SessionBuilder, origin: str, message: JSON) -> None:
    role = as_str(message.get("role"))
    message_id = origin.replace(" ", "-")
    if role == "user":
        b.user(user_message(message_id, _user_blocks(b, origin, message.get("content"))), origin)
    elif role == "assistant":
        _assistant(b, origin, message_id, message)
    elif role == "toolResult":
        b.result(
            as_str(message.get("toolCallId")),
            _user_blocks(b, origin, message.get("content")),
            origin,
            is_error=message.get("isError") is True,
            message_id=message_id,
        )
    elif role == "bashExecution":
        if message.get("excludeFromContext") is True:
            b.skip(origin, "bashExecution with excludeFromContext: pi keeps it out of the context")
        else:
            b.user(user_message(message_id, (TextBlock(bash_execution_text(message)),)), origin)
    else:
        b.skip(origin, f"message with role {role!r}: not sent to the model as a chat message")


def bash_execution_text(message: JSON) -> str:
    """The user text pi sends the model for a ``bashExecution`` message."""
    text = f"Ran `{as_str(message.get('command'))}`\n"
    output = as_str(message.get("output"))
    text += f"```\n{output}\n```" if output else "(no output)"
    exit_code = message.get("exitCode")
    if message.get("cancelled") is True:
        text += "\n\n(command cancelled)"
    elif isinstance(exit_code, int) and exit_code != 0:
        text += f"\n\nCommand exited with code {exit_code}"
    full_output = as_str(message.get("fullOutputPath"))
    if message.get("truncated") is True and full_output:
        text += f"\n\n[Output truncated. Full output: {full_output}]"
    return text


def _assistant(b: SessionBuilder, origin: str, message_id: str, message: JSON) -> None:
    stop = as_str(message.get("stopReason"))
    blocks: list[Block] = []
    for index, raw in enumerate(as_list(message.get("content"))):
        block = _assistant_block(as_dict(raw), f"{origin}-{index}")
        if block is None:
            b.skip(f"{origin} block {index}", f"unsupported block type {as_dict(raw).get('type')!r}")
        else:
            blocks.append(block)
    source = model_source(as_str(message.get("provider")), as_str(message.get("model")))
    b.assistant(
        Message(id=message_id, role="assistant", content=tuple(blocks), source=source),
        origin,
        usage=_usage(as_dict(message.get("usage"))),
        interrupted=stop == "aborted",
        dispatched=stop not in STOPPED,
    )
    if stop in STOPPED:
        error = as_str(message.get("errorMessage")) or None
        b.turn_reason(TurnEndReason(kind=STOPPED[stop], message=error))


def _compaction(b: SessionBuilder, origin: str, line: JSON, entry_seqs: dict[str, int]) -> None:
    """A pi compaction: entries before ``firstKeptEntryIndex`` (0-based over the file's entries; v2
    files name ``firstKeptEntryId``) were replaced by ``summary``."""
    kept_index = line.get("firstKeptEntryIndex")
    kept_id = line.get("firstKeptEntryId")
    b.compaction(origin, f"firstKeptEntryIndex {kept_index}, tokensBefore {line.get('tokensBefore')}")
    key = f"id:{kept_id}" if isinstance(kept_id, str) else f"index:{kept_index}"
    first_kept = entry_seqs.get(key)
    if first_kept is None:
        b.note(f"{origin}: first kept entry {key} not found; the summary replaces everything before it")
    b.foreign(
        ForeignCompaction(
            summary=user_message(origin.replace(" ", "-"), (TextBlock(as_str(line.get("summary"))),)),
            provider="pi",
            model=None,
            first_kept_seq=first_kept,
            origin=f"{origin} compaction summary",
        )
    )


def _assistant_block(part: JSON, fallback_id: str) -> Block | None:
    kind = part.get("type")
    if kind == "text":
        return TextBlock(as_str(part.get("text")))
    if kind == "thinking":
        return ReasoningBlock(as_str(part.get("thinking")))
    if kind == "toolCall":
        arguments = part.get("arguments", {})
        return ToolCallBlock(
            id=as_str(part.get("id")) or fallback_id,
            name=as_str(part.get("name")),
            arguments=arguments if isinstance(arguments, str) else compact_json(arguments),
        )
    return None


def _user_blocks(b: SessionBuilder, origin: str, content: Any) -> tuple[TextBlock | ImageBlock, ...]:
    if isinstance(content, str):
        return (TextBlock(content),)
    blocks: list[TextBlock | ImageBlock] = []
    for index, raw in enumerate(as_list(content)):
        part = as_dict(raw)
        if part.get("type") == "text":
            blocks.append(TextBlock(as_str(part.get("text"))))
        elif part.get("type") == "image":
            blocks.append(image_block(as_str(part.get("data")), as_str(part.get("mimeType"))))
        else:
            b.skip(f"{origin} block {index}", f"unsupported block type {part.get('type')!r}")
    return tuple(blocks)


def _usage(raw: JSON) -> Usage | None:
    if not raw:
        return None
    return Usage(
        input_tokens=as_int(raw.get("input")),
        output_tokens=as_int(raw.get("output")),
        cache_read_tokens=as_int(raw.get("cacheRead")),
        cache_write_tokens=as_int(raw.get("cacheWrite")),
    )


ENTRY_TYPES = frozenset({"session", "message", "model_change", "thinking_level_change", "compaction"})


def recognises(value: Any) -> bool:
    """A pi entry: one of its entry ``type``s (a ``message`` entry holding a message with a role)."""
    record = as_dict(value)
    kind = as_str(record.get("type"))
    return kind in ENTRY_TYPES and (kind != "message" or "role" in as_dict(record.get("message")))


FORMAT = TranscriptFormat(
    NAME,
    title="pi session JSONL",
    looks_like="pi session JSONL (a `session` header, `message` entries)",
    recognises=recognises,
    import_file=import_file,
)
