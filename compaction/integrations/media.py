"""Audio parts of a framework's messages as opaque blocks priced as audio.

No provider this library talks to takes audio, so an audio part is the framework's own JSON, handed
back unchanged (an :class:`~compaction.sessions.blocks.OpaqueBlock`), with what the meter needs to
price it as audio rather than as the text of its base64 (``media_type``, ``media_bytes``) and a
line a reader or a summary can see (``text``)."""

from __future__ import annotations

from compaction.sessions.blocks import OpaqueBlock

FORMATS = {"mp3": "audio/mpeg", "wav": "audio/wav"}
"""The ``format`` of an OpenAI ``input_audio`` part as a media type."""


def audio_block(
    framework: str, kind: str, payload: str, *, media_type: str | None, size: int = 0, reference: str = ""
) -> OpaqueBlock:
    """An audio part: ``size`` bytes carried inline, else the clip at ``reference`` (a URL, a file id)."""
    media = media_type if media_type and media_type.startswith("audio/") else "audio/*"
    where = f"{size} bytes" if size else reference or "by reference"
    return OpaqueBlock(
        framework=framework,
        kind=kind,
        payload=payload,
        text=f"audio ({media}, {where})",
        media_type=media,
        media_bytes=size,
    )


def base64_size(data: str) -> int:
    """The number of bytes the base64 text ``data`` decodes to (a ``data:`` URL's header skipped)."""
    body = data.partition(",")[2] if data.startswith("data:") else data
    body = body.strip()
    return max(len(body) * 3 // 4 - body[-2:].count("="), 0)


def format_media_type(audio_format: object) -> str:
    """The media type of an OpenAI ``input_audio`` ``format`` (``mp3``, ``wav``, ...)."""
    name = str(audio_format or "").lower()
    return FORMATS.get(name, f"audio/{name}" if name else "audio/*")
