"""Reading a transcript file: its bytes, JSON documents and JSON lines, and tolerant field access."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from compaction.errors import TranscriptError

JSON = dict[str, Any]


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


def read_time(value: Any) -> datetime | str | None:
    """An ISO-8601 string (naive means UTC) or epoch milliseconds, as aware UTC; None when there is
    none (``None`` or ``""``); else why ``value`` is not a usable time (out of range, unreadable)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as e:
            return f"is not an ISO 8601 time within years 1-9999 ({e})"
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not value > 0:
            return "is not a positive number of epoch milliseconds"
        try:
            return datetime.fromtimestamp(value / 1000, UTC)
        except (OverflowError, OSError, ValueError) as e:
            return f"is out of range as epoch milliseconds ({e})"
    return f"is a JSON {type(value).__name__}, not an ISO 8601 string or epoch milliseconds"
