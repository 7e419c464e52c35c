"""Content blocks and messages: the provider-neutral vocabulary the model sees.

Blocks are a tagged union on ``type`` (``text``, ``reasoning``, ``image``, ``tool-call``,
``tool-result``, ``opaque``). A message keeps a stable ``id`` across the log, the derived history
and the request.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

# ``gc=False``: the garbage collector does not track these Structs (a session holds hundreds of
# thousands of them, which every full collection would walk). Safe because none can be part of a
# reference cycle: each is frozen (no field is ever reassigned) and its fields are, by type, strings,
# numbers, ``None`` and tuples of these same Structs; a tuple is built before the Struct that holds
# it, so it cannot hold that Struct, and no field holds a mutable container that could come to.


class TextBlock(msgspec.Struct, frozen=True, gc=False, tag="text", tag_field="type"):
    text: str


class ReasoningBlock(msgspec.Struct, frozen=True, gc=False, tag="reasoning", tag_field="type"):
    text: str


class ImageBlock(msgspec.Struct, frozen=True, gc=False, tag="image", tag_field="type", omit_defaults=True):
    """An image attachment: its metadata, and where the image is when the log carries it (``url``,
    an http(s) or ``data:`` URL, or ``data``, the base64 bytes: a framework's message handed back
    as it came); without them the bytes live elsewhere."""

    attachment_id: str
    media_type: str
    bytes: int = 0
    width: int | None = None
    height: int | None = None
    url: str | None = None
    data: str | None = None
    detail: str | None = None


class OpaqueBlock(msgspec.Struct, frozen=True, gc=False, tag="opaque", tag_field="type", omit_defaults=True):
    """An item the library does not interpret, kept as the framework handed it over: reasoning with
    encrypted content, a hosted tool call with its result, a built-in tool part, a file or audio
    part. ``payload`` is the item's own JSON, returned unchanged; ``kind`` names it (``framework``
    the framework that made it); ``text`` is what a reader, or a summary, may see of it. The meter
    prices the payload; the item stays in its message, so it is never split from its pair.

    An audio part (``media_type`` ``audio/...``) is priced as audio, not as the text of its payload:
    ``media_bytes`` is the size of the clip the payload carries inline (0 when it names a URL or a
    file id instead); see :data:`compaction.engine.meters.AUDIO_BYTES_PER_TOKEN`."""

    framework: str
    kind: str
    payload: str
    text: str = ""
    media_type: str | None = None
    media_bytes: int = 0


class ToolCallBlock(msgspec.Struct, frozen=True, gc=False, tag="tool-call", tag_field="type"):
    id: str
    name: str
    arguments: str  # the raw JSON string the model produced


ResultPart = TextBlock | ImageBlock | OpaqueBlock
"""A part of a tool's result: text, an image, or a part the library does not interpret (a file, a
document, audio), kept as the framework handed it over."""


class ToolResultBlock(
    msgspec.Struct, frozen=True, gc=False, tag="tool-result", tag_field="type", omit_defaults=True
):
    tool_call_id: str
    content: tuple[ResultPart, ...] = ()
    is_error: bool = False


Block = TextBlock | ReasoningBlock | ImageBlock | ToolCallBlock | ToolResultBlock | OpaqueBlock

Role = Literal["user", "assistant", "system"]


class Source(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """Who produced a message: ``user``, ``model``, ``tool`` or ``plugin`` (open for extension)."""

    kind: str
    provider: str | None = None
    model: str | None = None
    call_id: str | None = None
    plugin: str | None = None
    compaction_id: str | None = None
    source_command_id: str | None = None


USER_SOURCE = Source(kind="user")


class Message(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    id: str
    role: Role
    content: tuple[Block, ...]
    source: Source = USER_SOURCE


def text_of(blocks: tuple[Block, ...] | tuple[ResultPart, ...]) -> str:
    """The concatenated text of the text blocks (reasoning excluded)."""
    return "\n".join(b.text for b in blocks if isinstance(b, TextBlock))


def tool_calls_of(message: Message) -> list[ToolCallBlock]:
    return [b for b in message.content if isinstance(b, ToolCallBlock)]


def tool_result_of(message: Message) -> ToolResultBlock | None:
    for block in message.content:
        if isinstance(block, ToolResultBlock):
            return block
    return None


def to_builtins(value: Any) -> Any:
    """Plain JSON-compatible data for a Struct (used by the CLI and provider shapes)."""
    return msgspec.to_builtins(value)
