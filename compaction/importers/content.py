"""Content blocks built from transcript parts: images, OpenAI-style text, user messages, sources."""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Any

from compaction.importers.json_input import as_dict, as_list, as_str
from compaction.sessions.blocks import Block, ImageBlock, Message, Source


def image_block(data: str, media_type: str) -> ImageBlock:
    """Image metadata for a base64 attachment: the id is a content hash, the bytes are counted."""
    try:
        size = len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        size = 0
    digest = hashlib.sha256(data.encode()).hexdigest()[:16]
    return ImageBlock(attachment_id=f"sha256-{digest}", media_type=media_type or "image", bytes=size)


def text_of_content(content: Any) -> str:
    """Plain text of OpenAI-style content: a string or a list of ``{type: text, text}`` parts."""
    if isinstance(content, str):
        return content
    parts = [as_str(as_dict(p).get("text")) for p in as_list(content)]
    return "\n".join(p for p in parts if p)


def user_message(message_id: str, blocks: tuple[Block, ...]) -> Message:
    return Message(id=message_id, role="user", content=blocks)


def model_source(provider: str, model: str) -> Source:
    return Source(kind="model", provider=provider or "unknown", model=model or "unknown")
