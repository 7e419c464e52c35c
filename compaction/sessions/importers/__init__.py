"""Real agent transcripts into sessions: Claude Code, pi, OpenHands, OpenAI-style chat, Codex CLI.

``import_path(path, format="auto")`` returns one :class:`ImportedSession` per session in the file
(OpenHands output holds one run per line; Claude Code sidechain threads are kept apart). Every
session is new and unsaved, satisfies the surface and turn/step rules, and is tool-pairing
balanced: a call that never got a result gets a synthesized error result (as interrupted-turn
repair does). Every event carries ``origin`` (the input line, uuid, run or message it came from),
and every input item not turned into an event is listed in ``skipped`` with the reason.

Session ids are ``uuid5(NAMESPACE, f"{format}:{sha256 of the file}:{index}")``, so importing the
same file twice yields the same ids.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from compaction.errors import ConfigurationError, TranscriptError
from compaction.sessions.importers import claude_code, codex, openai_chat, openhands, pi
from compaction.sessions.importers.common import NAMESPACE, ImportedSession, read_bytes
from compaction.sessions.importers.detect import detect_bytes, detect_format

__all__ = ["ALIASES", "FORMATS", "NAMESPACE", "ImportedSession", "detect_format", "import_path"]

FORMATS = ("claude-code", "pi", "openhands", "openai", "codex")

ALIASES = {"swe-agent": "openai", "mini-swe-agent": "openai"}
"""Format names accepted for what one importer reads (SWE-agent and mini-swe-agent write OpenAI-style
chat messages)."""

Importer = Callable[[Path, bytes], list[ImportedSession]]
_IMPORTERS: dict[str, Importer] = {
    "claude-code": claude_code.import_file,
    "pi": pi.import_file,
    "openhands": openhands.import_file,
    "openai": openai_chat.import_file,
    "codex": codex.import_file,
}


def import_path(path: Path, format: str = "auto") -> list[ImportedSession]:
    """Import every session of one transcript file (``format`` ``auto`` detects it).

    A forced ``format`` that yields no event at all raises :class:`TranscriptError` naming the
    format the file looks like: the file is of another format, not an empty conversation."""
    format = ALIASES.get(format, format)
    if format != "auto" and format not in _IMPORTERS:
        names = ", ".join((*FORMATS, *ALIASES))
        raise ConfigurationError(f"unknown transcript format {format!r}; expected auto or one of {names}")
    data = read_bytes(path)
    chosen = detect_bytes(path, data) if format == "auto" else format
    sessions = _IMPORTERS[chosen](path, data)
    if format != "auto" and not any(len(s.session) for s in sessions):
        _refuse_forced(path, data, format, sessions)
    return sessions


def _refuse_forced(path: Path, data: bytes, format: str, sessions: list[ImportedSession]) -> None:
    """A forced format that yields nothing: an error naming what the file looks like (nothing
    when the file is of that format and merely empty: its sessions are reported as skipped)."""
    try:
        detected = detect_bytes(path, data)
    except TranscriptError as e:
        looks = f"auto-detection does not recognise it either ({e})"
    else:
        if detected == format:
            return
        looks = f"it looks like {detected!r} (try --format {detected} or --format auto)"
    skipped = sum(len(s.skipped) for s in sessions)
    raise TranscriptError(
        str(path), None,
        f"--format {format} matches nothing in this file (0 events, {skipped} items skipped); "
        + looks,
    )  # fmt: skip
