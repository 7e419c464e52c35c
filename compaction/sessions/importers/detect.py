"""``--format auto``: tell a transcript's format from its first records.

A file is read as one JSON document when it is one (a list of chat messages, a SWE-agent ``.traj``,
a single OpenHands run), else as JSONL, judging by the first records that say something. Anything
else raises :class:`TranscriptError` naming the file and the line that could not be understood.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from compaction.errors import TranscriptError
from compaction.sessions.importers.codex import is_rollout_line
from compaction.sessions.importers.common import (
    JSON,
    as_dict,
    as_list,
    as_str,
    decode_json,
    read_bytes,
    whole_document,
)

CLAUDE_CODE_TYPES = frozenset(
    {
        "user",
        "assistant",
        "system",
        "summary",
        "progress",
        "file-history-snapshot",
        "queue-operation",
    }
)
CLAUDE_CODE_KEYS = frozenset({"uuid", "leafUuid", "sessionId", "messageId", "parentUuid"})
PI_TYPES = frozenset({"session", "message", "model_change", "thinking_level_change", "compaction"})
LOOKAHEAD = 50

EXPECTED = (
    "expected Claude Code JSONL (lines with `type` and `uuid`), pi session JSONL (a `session` "
    "header, `message` entries), OpenHands output (runs with a `history` of actions and "
    "observations), OpenAI-style chat messages (`role`/`content`, a SWE-agent `history`) or a "
    "Codex CLI rollout (lines with `timestamp`, `type` and `payload`)"
)


def detect_format(path: Path) -> str:
    """One of ``FORMATS``; raises :class:`TranscriptError` naming the file and line if unknown."""
    return detect_bytes(path, read_bytes(path))


def detect_bytes(path: Path, data: bytes) -> str:
    if not data.strip():
        raise TranscriptError(str(path), None, f"the file is empty; {EXPECTED}")
    document = whole_document(data)
    if document is not None:
        found = _document_format(document)
        if found:
            return found
        raise TranscriptError(
            str(path), 1, f"unknown transcript format: {EXPECTED}; found {_describe(document)}"
        )
    return _lines_format(path, data)


def _document_format(document: Any) -> str | None:
    if isinstance(document, list):
        return "openai" if document and all(_is_chat_message(m) for m in document[:LOOKAHEAD]) else None
    return _record_format(as_dict(document))


def _lines_format(path: Path, data: bytes) -> str:
    first_unknown: tuple[int, JSON] | None = None
    for number, raw in enumerate(data.split(b"\n")[: LOOKAHEAD * 4], start=1):
        if not raw.strip():
            continue
        try:
            record = decode_json(raw)
        except msgspec.DecodeError as e:
            raise TranscriptError(
                str(path), number, f"expected JSON or JSONL, found invalid JSON ({e}); {EXPECTED}"
            ) from e
        if not isinstance(record, dict):
            raise TranscriptError(
                str(path),
                number,
                f"expected a JSON object per line, found {_describe(record)}; {EXPECTED}",
            )
        found = _record_format(record)
        if found:
            return found
        first_unknown = first_unknown or (number, record)
    number, record = first_unknown or (1, {})
    raise TranscriptError(
        str(path), number, f"unknown transcript format: {EXPECTED}; found {_describe(record)}"
    )


def _record_format(record: JSON) -> str | None:
    kind = as_str(record.get("type"))
    if is_rollout_line(record):
        return "codex"
    history = record.get("history")
    if isinstance(history, list):
        # older OpenHands evaluation output holds [action, observation] pairs
        events = [as_dict(x) for e in history[:LOOKAHEAD] for x in (e if isinstance(e, list) else [e])]
        if any("action" in e or "observation" in e for e in events) and not any("role" in e for e in events):
            return "openhands"
        return "openai" if any(_is_chat_message(e) for e in events) else None
    if isinstance(record.get("messages"), list):
        return "openai"
    if kind in CLAUDE_CODE_TYPES and CLAUDE_CODE_KEYS & record.keys():
        return "claude-code"
    if kind in PI_TYPES and (kind != "message" or "role" in as_dict(record.get("message"))):
        return "pi"
    if _is_chat_message(record):
        return "openai"
    return None


def _is_chat_message(value: Any) -> bool:
    record = as_dict(value)
    return as_str(record.get("role")) in {"system", "user", "assistant", "tool", "function"}


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        keys = ", ".join(sorted(value)[:8])
        return f"a JSON object with keys [{keys}]"
    if isinstance(value, list):
        return f"a JSON list of {len(as_list(value))} items"
    return f"a JSON {type(value).__name__}"
