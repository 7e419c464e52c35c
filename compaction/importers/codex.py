"""Codex CLI rollouts (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``) into sessions.

Every line is a ``RolloutLine`` of ``codex-rs/protocol``: ``{"timestamp", "type", "payload"}`` with
``type`` one of ``session_meta``, ``turn_context``, ``response_item``, ``compacted`` and ``event_msg``.

* ``response_item`` payloads are the Responses API items Codex sent and received (``ResponseItem``
  in ``codex-rs/protocol/src/models.rs``). A user ``message`` is a prompt (a new turn), except the
  context Codex injects as user-role text (``<environment_context>``, ``<user_instructions>``, AGENTS.md
  instructions) and ``developer``/``system`` messages, which become ``context/message``. The
  assistant-side items of one model call (``reasoning``, assistant ``message``, ``function_call``,
  ``local_shell_call``, ``custom_tool_call``), up to the next tool output or user message, are one
  ``assistant/message`` (one step); ``function_call_output`` and ``custom_tool_call_output`` answer
  their call by ``call_id``. A ``local_shell_call`` becomes a ``local_shell`` call whose arguments
  are its ``action``; a ``custom_tool_call`` keeps its free-form ``input`` as the arguments.
* ``compacted`` lines are Codex's own compactions: a compaction bracket (through the engine's
  foreign-compaction hook) that replaces the whole surface with what Codex kept, its
  ``replacement_history`` messages when the line has one, else its ``message`` (the summary).
* ``session_meta`` names the provider (``model_provider``) and the base instructions (the
  ``request/header`` system text); ``turn_context`` names the model of the turns that follow.
  ``event_msg`` lines are the UI's telemetry (they repeat the items) and are reported as skipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from compaction.engine.foreign import ForeignCompaction
from compaction.importers.builder import SessionBuilder
from compaction.importers.content import model_source, user_message
from compaction.importers.format import TranscriptFormat
from compaction.importers.ids import file_digest, session_id_for
from compaction.importers.json_input import (
    JSON,
    as_dict,
    as_list,
    as_str,
    compact_json,
    json_lines,
)
from compaction.importers.records import timestamped
from compaction.importers.result import ImportedSession
from compaction.sessions.blocks import Block, ImageBlock, Message, ReasoningBlock, TextBlock, ToolCallBlock

NAME = "codex"
ROLLOUT_TYPES = frozenset({"session_meta", "turn_context", "response_item", "compacted", "event_msg"})
CALLS = frozenset({"function_call", "local_shell_call", "custom_tool_call"})
OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})
CONTEXT_PREFIXES = ("<environment_context>", "<user_instructions>", "# AGENTS.md instructions")


class _Rollout:
    """The importer's state: the builder, the envelope, and the model call being collected."""

    def __init__(self, builder: SessionBuilder) -> None:
        self.b = builder
        self.provider = "openai"
        self.model = "unknown"
        self.system: str | None = None
        self.call: list[Block] = []
        self.call_origin = ""
        self.call_origins: dict[str, str] = {}

    def line(self, number: int, line: JSON) -> None:
        origin = f"line {number}"
        kind = as_str(line.get("type"))
        payload = as_dict(line.get("payload"))
        if kind == "response_item":
            self.item(origin, payload)
            return
        if kind == "event_msg":  # telemetry between the items of one model call: no flush
            self.b.skip(
                origin, f"event_msg {as_str(payload.get('type'))!r}: UI telemetry, not sent to the model"
            )
            return
        self.flush()
        if kind == "session_meta":
            self.meta(origin, payload)
        elif kind == "turn_context":
            self.model = as_str(payload.get("model")) or self.model
            self.b.header(self.provider, self.model, system=self.system, origin=origin)
            self.b.skip(origin, f"turn context (model {self.model}, cwd {payload.get('cwd')})")
        elif kind == "compacted":
            self.compacted(origin, payload)
        else:
            self.b.skip(origin, f"{kind or 'untyped'} line: not a rollout item")

    def meta(self, origin: str, payload: JSON) -> None:
        self.provider = as_str(payload.get("model_provider")) or self.provider
        instructions = as_dict(payload.get("base_instructions")).get("text") or payload.get("instructions")
        self.system = as_str(instructions) or None
        self.b.header(self.provider, self.model, system=self.system, origin=origin)
        self.b.skip(
            origin,
            f"session meta (id {payload.get('id')}, cwd {payload.get('cwd')}, "
            f"cli {payload.get('cli_version')}): provider and instructions go to request/header",
        )

    # ------------------------------------------------------------ response items

    def item(self, origin: str, item: JSON) -> None:
        kind = as_str(item.get("type"))
        role = as_str(item.get("role"))
        if kind == "reasoning" or kind in CALLS or (kind == "message" and role == "assistant"):
            self.collect(origin, item)
            return
        self.flush()
        if kind in OUTPUTS:
            self.output(origin, item)
        elif kind == "message":
            self.message(origin, item)
        else:
            self.b.skip(origin, f"response item {kind!r}: not a message, reasoning, tool call or output")

    def collect(self, origin: str, item: JSON) -> None:
        if not self.call:
            self.call_origin = origin
        kind = as_str(item.get("type"))
        if kind == "reasoning":
            parts = as_list(item.get("summary")) or as_list(item.get("content"))
            self.call.append(ReasoningBlock("\n".join(as_str(as_dict(p).get("text")) for p in parts)))
        elif kind == "message":
            self.call.extend(TextBlock(as_str(as_dict(p).get("text"))) for p in as_list(item.get("content")))
        else:
            call = _call_block(item, f"{origin.replace(' ', '-')}-call")
            self.call_origins[call.id] = origin
            self.call.append(call)

    def flush(self) -> None:
        """The collected assistant-side items, as one model call."""
        if not self.call:
            return
        message = Message(
            id=self.call_origin.replace(" ", "-"),
            role="assistant",
            content=tuple(self.call),
            source=model_source(self.provider, self.model),
        )
        self.b.assistant(message, self.call_origin, call_origins=dict(self.call_origins))
        self.call = []
        self.call_origins = {}

    def output(self, origin: str, item: JSON) -> None:
        output = item.get("output")
        self.b.result(
            as_str(item.get("call_id")),
            _output_blocks(output),
            origin,
            message_id=origin.replace(" ", "-"),
        )

    def message(self, origin: str, item: JSON) -> None:
        role = as_str(item.get("role"))
        blocks = _content_blocks(item.get("content"))
        message = user_message(origin.replace(" ", "-"), blocks)
        text = "\n".join(b.text for b in blocks if isinstance(b, TextBlock)).lstrip()
        if role in ("developer", "system") or text.startswith(CONTEXT_PREFIXES):
            self.b.context(message, f"{origin} ({role} context)")
        elif role == "user":
            self.b.user(message, origin)
        else:
            self.b.skip(origin, f"message with role {role!r}: expected user, assistant, developer or system")

    # ------------------------------------------------------------ compactions

    def compacted(self, origin: str, payload: JSON) -> None:
        """Codex replaced its whole history with ``replacement_history`` (the user messages it kept
        and the summary), or, in older rollouts, with the summary ``message`` alone."""
        summary = as_str(payload.get("message"))
        replacement = [as_dict(i) for i in as_list(payload.get("replacement_history"))]
        texts = [
            "\n".join(b.text for b in _content_blocks(i.get("content")) if isinstance(b, TextBlock))
            for i in replacement
            if i.get("type") == "message"
        ]
        kept = [t for t in texts if t] or [summary]
        if summary and not any(summary in text for text in kept):
            kept.append(summary)
        self.b.compaction(origin, f"{len(replacement)} replacement items, summary of {len(summary)} chars")
        self.b.foreign(
            ForeignCompaction(
                summary=user_message(origin.replace(" ", "-"), tuple(TextBlock(t) for t in kept)),
                provider="codex",
                model=None if self.model == "unknown" else self.model,
                first_kept_seq=None,
                origin=f"{origin} compacted",
                detail=f"replacement_history of {len(replacement)} items",
            )
        )


def import_file(path: Path, data: bytes) -> list[ImportedSession]:
    lines, truncated = json_lines(path, data)
    builder = SessionBuilder(session_id_for(NAME, file_digest(data), 0), source=str(path), format=NAME)
    builder.skipped.extend(truncated)
    rollout = _Rollout(builder)
    for number, line in lines:
        if not builder.first_time(f"line {number}", timestamped(line), line):
            continue
        builder.at(builder.time_of(line.get("timestamp"), f"line {number}"))
        rollout.line(number, line)
    rollout.flush()
    return [builder.finish()]


def recognises(value: Any) -> bool:
    """A ``RolloutLine``: a rollout ``type`` with a ``payload`` object (Codex always writes a
    ``timestamp`` too; trimmed copies of rollouts often drop it, so it is not required)."""
    record = as_dict(value)
    return as_str(record.get("type")) in ROLLOUT_TYPES and isinstance(record.get("payload"), dict)


def _call_block(item: JSON, fallback_id: str) -> ToolCallBlock:
    kind = as_str(item.get("type"))
    call_id = as_str(item.get("call_id")) or as_str(item.get("id")) or fallback_id
    if kind == "local_shell_call":
        return ToolCallBlock(id=call_id, name="local_shell", arguments=compact_json(item.get("action", {})))
    if kind == "custom_tool_call":
        return ToolCallBlock(id=call_id, name=as_str(item.get("name")), arguments=as_str(item.get("input")))
    arguments = item.get("arguments", "")
    return ToolCallBlock(
        id=call_id,
        name=as_str(item.get("name")),
        arguments=arguments if isinstance(arguments, str) else compact_json(arguments),
    )


def _content_blocks(content: Any) -> tuple[TextBlock | ImageBlock, ...]:
    """``ContentItem``s: ``input_text`` / ``output_text`` text, ``input_image`` as a placeholder."""
    if isinstance(content, str):
        return (TextBlock(content),)
    blocks: list[TextBlock | ImageBlock] = []
    for raw in as_list(content):
        part = as_dict(raw)
        kind = as_str(part.get("type"))
        if kind in ("input_text", "output_text", "text"):
            blocks.append(TextBlock(as_str(part.get("text"))))
        elif kind == "input_image":
            url = as_str(part.get("image_url"))
            media = url[5 : url.find(";")] if url.startswith("data:") and ";" in url else "image"
            blocks.append(
                ImageBlock(attachment_id=f"codex-image-{len(url)}", media_type=media, bytes=len(url))
            )
    return tuple(blocks)


def _output_blocks(output: Any) -> tuple[TextBlock | ImageBlock, ...]:
    """``FunctionCallOutputPayload``: a plain string, or a list of content items."""
    if isinstance(output, str):
        return (TextBlock(output),)
    if isinstance(output, list):
        return _content_blocks(output)
    if isinstance(output, dict):  # older rollouts: {"content": ..., "success": ...}
        return (TextBlock(as_str(output.get("content")) or compact_json(output)),)
    return (TextBlock(compact_json(output)),)


FORMAT = TranscriptFormat(
    NAME,
    title="Codex CLI rollouts",
    looks_like="a Codex CLI rollout (lines with `timestamp`, `type` and `payload`)",
    recognises=recognises,
    import_file=import_file,
)
