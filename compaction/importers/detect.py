"""``--format auto``: tell a transcript's format from its first records.

A file is read as one JSON document when it is one (a list or an object), else as JSONL, judging by
the first records that say something: the formats of :mod:`compaction.importers.registry` are asked
in order and the first that recognises the document (or a record) is the file's format. Anything
else raises :class:`TranscriptError` naming the file and the line that could not be understood.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from compaction.errors import TranscriptError
from compaction.importers import registry
from compaction.importers.format import LOOKAHEAD, TranscriptFormat
from compaction.importers.json_input import JSON, as_list, decode_json, read_bytes, whole_document


def detect_format(path: Path) -> str:
    """The name of the first format of the registry that recognises the file; raises
    :class:`TranscriptError` naming the file and line if none does."""
    return detect_bytes(path, read_bytes(path))


def detect_bytes(path: Path, data: bytes) -> str:
    if not data.strip():
        raise TranscriptError(str(path), None, f"the file is empty; {registry.expected()}")
    document = whole_document(data)
    if document is not None:
        found = registry.recognised(document)
        if found:
            return found
        raise TranscriptError(
            str(path), 1, f"unknown transcript format: {registry.expected()}; found {_describe(document)}"
        )
    return _lines_format(path, data)


def recognises_file(format: TranscriptFormat, path: Path, data: bytes) -> bool:
    """Whether ``format`` recognises the file as detection reads it: the whole document, or one of
    the first records. A file detection cannot read (bad JSON) counts as recognised: the format's
    importer names the line it cannot read."""
    document = whole_document(data)
    if document is not None:
        return format.recognises(document)
    try:
        return any(format.recognises(record) for _, record in _first_records(path, data))
    except TranscriptError:
        return True


def _first_records(path: Path, data: bytes) -> Iterator[tuple[int, JSON]]:
    """The first JSONL records (line number, object) detection reads; a line that is not a JSON
    object raises :class:`TranscriptError` naming it."""
    for number, raw in enumerate(data.split(b"\n")[: LOOKAHEAD * 4], start=1):
        if not raw.strip():
            continue
        try:
            record = decode_json(raw)
        except msgspec.DecodeError as e:
            raise TranscriptError(
                str(path), number, f"expected JSON or JSONL, found invalid JSON ({e}); {registry.expected()}"
            ) from e
        if not isinstance(record, dict):
            raise TranscriptError(
                str(path),
                number,
                f"expected a JSON object per line, found {_describe(record)}; {registry.expected()}",
            )
        yield number, record


def _lines_format(path: Path, data: bytes) -> str:
    first_unknown: tuple[int, JSON] | None = None
    for number, record in _first_records(path, data):
        found = registry.recognised(record)
        if found:
            return found
        first_unknown = first_unknown or (number, record)
    number, record = first_unknown or (1, {})
    raise TranscriptError(
        str(path), number, f"unknown transcript format: {registry.expected()}; found {_describe(record)}"
    )


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        keys = ", ".join(sorted(value)[:8])
        return f"a JSON object with keys [{keys}]"
    if isinstance(value, list):
        return f"a JSON list of {len(as_list(value))} items"
    return f"a JSON {type(value).__name__}"
