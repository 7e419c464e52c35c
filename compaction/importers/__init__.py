"""Real agent transcripts into sessions, one module per format (the formats table of
docs/formats.md lists them; :mod:`compaction.importers.registry` holds them in detection order).

``import_path(path, format="auto")`` returns one :class:`ImportedSession` per session in the file
(OpenHands output holds one run per line; Claude Code sidechain threads are kept apart). Every
session is new and unsaved, satisfies the surface and turn/step rules, and is tool-pairing
balanced: a call that never got a result gets a synthesized error result (as interrupted-turn
repair does). Every event carries ``origin`` (the input line, uuid, run or message it came from),
and every input item not turned into an event is listed in ``skipped`` with the reason. Another
harness's compaction becomes a compaction bracket (:mod:`compaction.engine.foreign`).

Session ids are ``uuid5(NAMESPACE, f"{format}:{sha256 of the file}:{index}")``, so importing the
same file twice yields the same ids.
"""

from __future__ import annotations

from pathlib import Path

from compaction.errors import TranscriptError
from compaction.importers import registry
from compaction.importers.detect import detect_bytes, detect_format, recognises_file
from compaction.importers.format import TranscriptFormat
from compaction.importers.ids import NAMESPACE
from compaction.importers.json_input import read_bytes
from compaction.importers.result import ImportedSession

__all__ = ["ImportedSession", "NAMESPACE", "TranscriptFormat", "detect_format", "import_path"]  # noqa: RUF022 (sorted())


def import_path(path: Path, format: str = "auto") -> list[ImportedSession]:
    """Import every session of one transcript file (``format`` ``auto`` detects it).

    A forced ``format`` that finds none of its own records (its ``recognises`` accepts neither the
    document nor any of the first records), or that yields no event at all, raises
    :class:`TranscriptError` naming the format the file looks like: the file is of another format,
    not a conversation of this one (an importer would otherwise invent one from what it half
    understands)."""
    forced = None if format == "auto" else registry.named(format)
    data = read_bytes(path)
    if forced is not None and not recognises_file(forced, path, data):
        _refuse_forced(path, data, forced.name, f"none of it is {forced.title}")
    chosen = forced or registry.named(detect_bytes(path, data))
    sessions = chosen.import_file(path, data)
    if forced is not None and not any(len(s.session) for s in sessions):
        skipped = sum(len(s.skipped) for s in sessions)
        _refuse_forced(path, data, forced.name, f"0 events, {skipped} items skipped")
    return sessions


def _refuse_forced(path: Path, data: bytes, format: str, found: str) -> None:
    """A forced format that finds nothing of its own: an error naming what the file looks like
    (nothing when the file is of that format and merely empty: its sessions are reported as
    skipped)."""
    try:
        detected = detect_bytes(path, data)
    except TranscriptError as e:
        looks = f"auto-detection does not recognise it either ({e})"
    else:
        if detected == format:
            return
        looks = f"it looks like {detected!r} (try --format {detected} or --format auto)"
    raise TranscriptError(
        str(path), None, f"--format {format} matches nothing in this file: {found}; {looks}"
    )
