"""Real agent transcripts into sessions: Claude Code, pi, OpenHands, OpenAI-style chat.

``import_path(path, format="auto")`` returns one :class:`ImportedSession` per session in the file
(OpenHands output holds one run per line; Claude Code sidechain threads are kept apart). Every
session is new and unsaved, satisfies the surface and turn/step rules, and is tool-pairing
balanced: a call that never got a result gets a synthesized error result (spec §d.16). Every event
carries ``origin`` (the input line, uuid, run or message it came from), and every input item not
turned into an event is listed in ``skipped`` with the reason.

Session ids are ``uuid5(NAMESPACE, f"{format}:{sha256 of the file}:{index}")``, so importing the
same file twice yields the same ids.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from compaction.errors import ConfigurationError
from compaction.sessions.importers import claude_code, openai_chat, openhands, pi
from compaction.sessions.importers.common import NAMESPACE, ImportedSession, read_bytes
from compaction.sessions.importers.detect import detect_bytes, detect_format

__all__ = ["FORMATS", "NAMESPACE", "ImportedSession", "detect_format", "import_path"]

FORMATS = ("claude-code", "pi", "openhands", "openai")

Importer = Callable[[Path, bytes], list[ImportedSession]]
_IMPORTERS: dict[str, Importer] = {
    "claude-code": claude_code.import_file,
    "pi": pi.import_file,
    "openhands": openhands.import_file,
    "openai": openai_chat.import_file,
}


def import_path(path: Path, format: str = "auto") -> list[ImportedSession]:
    """Import every session of one transcript file (``format`` ``auto`` detects it)."""
    if format != "auto" and format not in _IMPORTERS:
        raise ConfigurationError(
            f"unknown transcript format {format!r}; expected auto or one of {', '.join(FORMATS)}"
        )
    data = read_bytes(path)
    chosen = detect_bytes(path, data) if format == "auto" else format
    return _IMPORTERS[chosen](path, data)
