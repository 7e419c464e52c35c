"""Gemini CLI chat checkpoints into sessions.

``/chat save TAG`` writes ``checkpoint-TAG.json`` into the project's temporary directory
(``~/.gemini/tmp/<project hash>/``): the chat history the CLI sends the model, a JSON list of
``Content`` objects of ``@google/genai`` (newer versions wrap it: ``{"history": [...]}``). Each
content is ``{"role": "user" | "model", "parts": [...]}``; a part holds ``text`` (with
``"thought": true``, the model's thinking), a ``functionCall`` ``{name, args, id?}``, a
``functionResponse`` ``{name, response, id?}`` or ``inlineData`` ``{mimeType, data}``.

* A ``model`` content is one model call (one step): its text, thoughts and function calls.
* A ``user`` content with ``functionResponse`` parts answers the calls of the step before it: by
  ``id`` when the response carries one its call had, else the first unanswered call of that
  ``name``. A response whose ``response`` has an ``error`` is an error result; one holding just an
  ``output`` string is that text, anything else its compact JSON. Other parts of such a content
  (the files a ``read_many_files`` response attaches) are harness context inside the turn.
* Any other ``user`` content is a prompt (a new turn), except the context the CLI opens every chat
  with (``This is the Gemini CLI. We are setting up the context for our chat.``), which is a
  context message.
* A call no response answers gets the synthesized error result, as in every importer.
* A checkpoint holds no model name and no timestamps: the provider is ``google``, the model
  ``unknown``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from compaction.errors import TranscriptError
from compaction.importers.builder import SessionBuilder
from compaction.importers.content import image_block, model_source, user_message
from compaction.importers.format import LOOKAHEAD, TranscriptFormat
from compaction.importers.ids import file_digest, session_id_for
from compaction.importers.json_input import JSON, as_dict, as_list, as_str, compact_json, whole_document
from compaction.importers.records import verbatim
from compaction.importers.result import ImportedSession
from compaction.sessions.blocks import Block, ImageBlock, Message, ReasoningBlock, TextBlock, ToolCallBlock

NAME = "gemini"
PROVIDER = "google"
ROLES = frozenset({"user", "model"})
SETUP_PREFIX = "This is the Gemini CLI. We are setting up the context for our chat."
"""How the context the Gemini CLI opens every chat with begins."""


def import_file(path: Path, data: bytes) -> list[ImportedSession]:
    contents = _history(path, whole_document(data))
    builder = SessionBuilder(session_id_for(NAME, file_digest(data), 0), source=str(path), format=NAME)
    chat = _Chat(builder)
    for index, raw in enumerate(contents):
        if builder.first_time(f"content[{index}]", _content_key(as_dict(raw)), raw):
            chat.content(f"content[{index}]", as_dict(raw))
    return [builder.finish()]


def _history(path: Path, document: Any) -> list[Any]:
    if isinstance(document, list):
        return document
    if isinstance(as_dict(document).get("history"), list):
        return list(document["history"])
    raise TranscriptError(
        str(path), None, "expected a Gemini CLI checkpoint: a JSON list of contents or {history: [...]}"
    )


class _Chat:
    """The importer's state: the builder and the calls of the last model content, by name."""

    def __init__(self, builder: SessionBuilder) -> None:
        self.b = builder
        self.unanswered: dict[str, list[str]] = {}  # function name -> call ids, in call order

    def content(self, origin: str, content: JSON) -> None:
        role = as_str(content.get("role"))
        parts = [as_dict(p) for p in as_list(content.get("parts"))]
        if role == "model":
            self.model(origin, parts)
        elif role == "user" and any("functionResponse" in p for p in parts):
            self.responses(origin, parts)
        elif role == "user":
            self.prompt(origin, parts)
        else:
            self.b.skip(origin, f"content with role {role!r}: expected user or model")

    def model(self, origin: str, parts: list[JSON]) -> None:
        blocks: list[Block] = []
        self.unanswered = {}
        for index, part in enumerate(parts):
            block = _model_block(part, f"{origin.replace(' ', '-')}-call-{index}")
            if block is None:
                self.b.skip(f"{origin} part {index}", f"unsupported part with keys {sorted(part)}")
                continue
            if isinstance(block, ToolCallBlock):
                self.unanswered.setdefault(block.name, []).append(block.id)
            blocks.append(block)
        message = Message(
            id=origin, role="assistant", content=tuple(blocks), source=model_source(PROVIDER, "")
        )
        self.b.assistant(message, origin)

    def responses(self, origin: str, parts: list[JSON]) -> None:
        others: list[JSON] = []
        for index, part in enumerate(parts):
            if "functionResponse" not in part:
                others.append(part)
                continue
            response = as_dict(part.get("functionResponse"))
            result = as_dict(response.get("response"))
            self.b.result(
                self.call_id(response),
                (TextBlock(_result_text(result)),),
                f"{origin} part {index}",
                is_error="error" in result,
                message_id=f"{origin}-{index}",
            )
        if others:
            blocks = _user_blocks(self.b, origin, others)
            self.b.context(
                user_message(f"{origin}-context", blocks), f"{origin} (parts beside the responses)"
            )

    def call_id(self, response: JSON) -> str:
        """The call a response answers: its ``id`` when a call of the step had it, else the first
        unanswered call of its ``name`` (an unknown name falls through to the builder's report)."""
        name = as_str(response.get("name"))
        waiting = self.unanswered.get(name, [])
        wanted = as_str(response.get("id"))
        if wanted and wanted in waiting:
            waiting.remove(wanted)
            return wanted
        return waiting.pop(0) if waiting else wanted or f"unanswerable {name}"

    def prompt(self, origin: str, parts: list[JSON]) -> None:
        message = user_message(origin, _user_blocks(self.b, origin, parts))
        text = "".join(as_str(p.get("text")) for p in parts).lstrip()
        if text.startswith(SETUP_PREFIX):
            self.b.context(message, f"{origin} (the Gemini CLI's setup context)")
        else:
            self.b.user(message, origin)


def _content_key(content: JSON) -> str | None:
    """A content carries no id of its own; one whose function calls or responses carry ids is
    told by its content, which those ids make unique. Any other content has no key."""
    for part in as_list(content.get("parts")):
        for kind in ("functionCall", "functionResponse"):
            if as_str(as_dict(as_dict(part).get(kind)).get("id")):
                return verbatim(content)
    return None


def _model_block(part: JSON, fallback_id: str) -> Block | None:
    if "functionCall" in part:
        call = as_dict(part.get("functionCall"))
        return ToolCallBlock(
            id=as_str(call.get("id")) or fallback_id,
            name=as_str(call.get("name")),
            arguments=compact_json(call.get("args", {})),
        )
    if isinstance(part.get("text"), str):
        text = part["text"]
        return ReasoningBlock(text) if part.get("thought") is True else TextBlock(text)
    return None


def _user_blocks(b: SessionBuilder, origin: str, parts: list[JSON]) -> tuple[TextBlock | ImageBlock, ...]:
    blocks: list[TextBlock | ImageBlock] = []
    for index, part in enumerate(parts):
        inline = as_dict(part.get("inlineData"))
        if isinstance(part.get("text"), str):
            blocks.append(TextBlock(part["text"]))
        elif inline:
            blocks.append(image_block(as_str(inline.get("data")), as_str(inline.get("mimeType"))))
        else:
            b.skip(f"{origin} part {index}", f"unsupported part with keys {sorted(part)}")
    return tuple(blocks)


def _result_text(result: JSON) -> str:
    for key in ("output", "error"):
        if set(result) == {key} and isinstance(result[key], str):
            return str(result[key])
    return compact_json(result)


def _is_content(value: Any) -> bool:
    content = as_dict(value)
    return as_str(content.get("role")) in ROLES and isinstance(content.get("parts"), list)


def recognises(value: Any) -> bool:
    """A list of ``{role: user | model, parts: [...]}`` contents, or ``{history: [...]}`` of them."""
    history = value if isinstance(value, list) else as_dict(value).get("history")
    return isinstance(history, list) and bool(history) and all(_is_content(c) for c in history[:LOOKAHEAD])


FORMAT = TranscriptFormat(
    NAME,
    title="Gemini CLI chat checkpoints",
    looks_like="a Gemini CLI checkpoint (a list of `role`/`parts` contents)",
    recognises=recognises,
    import_file=import_file,
)
