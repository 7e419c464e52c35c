"""What a transcript format module exports: a :class:`TranscriptFormat` named ``FORMAT``.

``recognises`` is asked about one JSON value: the whole file when it is one JSON document (a list
or an object), else each JSONL record in turn. It answers whether that value is of its format; the
registry asks the formats in order and the first that says yes is the file's format, so a check may
be loose where an earlier format has already claimed what it would confuse.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compaction.importers.result import ImportedSession

LOOKAHEAD = 50
"""How many items of a list a recogniser looks at."""

Importer = Callable[[Path, bytes], list[ImportedSession]]
"""Every session of one file (its path, for origins and errors, and its bytes)."""


@dataclass(frozen=True)
class TranscriptFormat:
    """One transcript format: its name, how to recognise it and how to import it."""

    name: str
    """The ``--format`` name, also the ``format`` of every :class:`ImportedSession` it makes."""
    title: str
    """What people call the files (the help and the docs' format table)."""
    looks_like: str
    """What the detector expects of such a file, for the error when nothing recognises a file."""
    recognises: Callable[[Any], bool]
    import_file: Importer
    aliases: tuple[str, ...] = ()
    """Other ``--format`` names for what this importer reads (other harnesses writing its shape)."""
