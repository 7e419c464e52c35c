"""What every importer shares: the result record, session ids, and JSON access helpers."""

from __future__ import annotations

import base64
import binascii
import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
from eventsourcing.utils import TopicError, resolve_topic

from compaction.errors import TranscriptError
from compaction.sessions.blocks import (
    Block,
    ImageBlock,
    Message,
    Source,
)
from compaction.sessions.session import Session

NAMESPACE = uuid.UUID("6b1f2c1e-9d1a-5c3e-8f47-0d6e1c2a9b30")
"""Namespace of imported session ids: ``uuid5(NAMESPACE, f"{format}:{sha256}:{index}")``."""

JSON = dict[str, Any]


# ---------------------------------------------------------------- other harnesses' compactions


@dataclass(frozen=True)
class ForeignCompaction:
    """A compaction another harness made (Claude Code ``compact_boundary`` + ``isCompactSummary``,
    pi ``compaction``): its summary message, who made it, and where its retained tail begins."""

    summary: Message
    provider: str  # "claude-code" | "pi"
    model: str | None
    first_kept_seq: int | None  # None: everything on the surface before the boundary is replaced
    origin: str
    detail: str = ""


CompactionHandler = Callable[[Session, ForeignCompaction], None]
"""Turns a foreign compaction into events."""

FOREIGN_COMPACTION_TOPIC = "compaction.engine.foreign:import_foreign_compaction"
"""The handler importers call for foreign compactions, resolved by topic on first use (the way
stored event types are, :data:`compaction.sessions.events.EVENT_TOPICS`), so importing the
importers loads nothing above this package."""

_HANDLERS: list[CompactionHandler] = []


def register_compaction_handler(handler: CompactionHandler) -> None:
    """Install another handler for foreign compactions (the latest one wins)."""
    _HANDLERS[:] = [handler]


def compaction_handler() -> CompactionHandler | None:
    """The installed handler, else the one :data:`FOREIGN_COMPACTION_TOPIC` names (None when that
    cannot be imported: the summary is then imported as a plain user message)."""
    if not _HANDLERS:
        try:
            register_compaction_handler(resolve_topic(FOREIGN_COMPACTION_TOPIC))
        except TopicError:
            return None
    return _HANDLERS[0]


# ---------------------------------------------------------------- the result record


@dataclass
class ImportedSession:
    """One imported session (unsaved: every event is pending) and what the import did."""

    session: Session
    source: str
    format: str
    events: int
    messages: int
    tool_calls: int
    tool_results: int
    synthesized_results: int
    compactions: int
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def session_id_for(format: str, digest: str, index: int) -> uuid.UUID:
    """The deterministic id of the ``index``-th session imported from a file with ``digest``."""
    return uuid.uuid5(NAMESPACE, f"{format}:{digest}:{index}")


def file_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------- reading input


BOM = b"\xef\xbb\xbf"


def read_bytes(path: Path) -> bytes:
    """The file's bytes, without a leading UTF-8 byte order mark (editors on Windows write one)."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TranscriptError(str(path), None, f"cannot read the transcript: {e}") from e
    return data[len(BOM) :] if data.startswith(BOM) else data


def decode_json(raw: bytes | str) -> Any:
    """``msgspec.json.decode`` that reports JSON nested too deeply to decode (a RecursionError
    inside the decoder) as a :class:`msgspec.DecodeError`, so callers name the line."""
    try:
        return msgspec.json.decode(raw)
    except RecursionError:
        raise msgspec.DecodeError(
            "JSON nested too deeply to read (more levels than the decoder's recursion limit)"
        ) from None


def json_lines(path: Path, data: bytes) -> tuple[list[tuple[int, JSON]], list[str]]:
    """Parse JSONL into ``(line number, object)`` pairs; blank lines are ignored.

    A line that is not a JSON object raises :class:`TranscriptError` naming the file and line,
    except a truncated last line (a crash mid-write), which is reported in the returned list.
    """
    raw_lines = data.split(b"\n")
    while raw_lines and not raw_lines[-1].strip():
        raw_lines.pop()
    parsed: list[tuple[int, JSON]] = []
    skipped: list[str] = []
    for number, raw in enumerate(raw_lines, start=1):
        if not raw.strip():
            continue
        try:
            value = decode_json(raw)
        except msgspec.DecodeError as e:
            if number == len(raw_lines) and "nested too deeply" not in str(e):
                skipped.append(f"line {number}: truncated JSON at the end of the file ({e})")
                continue
            raise TranscriptError(
                str(path), number, f"expected one JSON object per line, found invalid JSON ({e})"
            ) from e
        if not isinstance(value, dict):
            raise TranscriptError(
                str(path),
                number,
                f"expected one JSON object per line, found a JSON {type(value).__name__}",
            )
        parsed.append((number, value))
    return parsed, skipped


def whole_document(data: bytes) -> Any:
    """The file as one JSON list or object, or None when it is JSONL (or not JSON at all)."""
    if data.lstrip()[:1] not in (b"[", b"{"):
        return None
    try:
        return decode_json(data)
    except msgspec.DecodeError:
        return None


def as_dict(value: Any) -> JSON:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_str(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


def as_int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def compact_json(value: Any) -> str:
    """Tool arguments as the compact JSON string a provider would have streamed."""
    return msgspec.json.encode(value).decode()


def parse_time(value: Any) -> datetime | None:
    """An ISO-8601 string (naive means UTC) or epoch milliseconds, as aware UTC; else None."""
    if isinstance(value, str) and value:
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        try:
            return datetime.fromtimestamp(value / 1000, UTC)
        except (OverflowError, OSError, ValueError):
            return None
    return None


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
