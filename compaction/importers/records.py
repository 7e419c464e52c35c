"""Each record of a transcript once: records told apart by their format's record id.

A format names what identifies one of its records (:func:`record_id`: a Claude Code line's
``uuid``, a pi entry's ``id``, an OpenHands event's ``id``), or, for a record with no id of its own
that cannot be written twice legitimately, the record itself (:func:`verbatim`: a line that carries
its own timestamp, a message that carries tool call ids). :class:`RecordIds` remembers every
record by that key:

* a record whose key was seen with the same content is a **repeat** (a file concatenated with
  itself, a line written twice): it is skipped, and the reason names the record it repeats;
* a record whose key was seen with other content is a **conflict**: which of the two the harness
  meant cannot be told, so the import fails with a :class:`TranscriptError` naming both records
  and the fields that differ (nothing is imported, so nothing is lost);
* a record without a key (an OpenAI-style message with neither id nor time) is always new.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from compaction.errors import TranscriptError


def record_id(kind: str, value: Any) -> str | None:
    """The key of a record whose id is ``value`` (a string or an integer), None without one."""
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        return None
    return f"{kind} {value!r}"


def verbatim(record: Any) -> str:
    """The key of a record identified by its whole content."""
    return f"content sha256:{_digest(record)}"


def timestamped(record: Any, field: str = "timestamp") -> str | None:
    """:func:`verbatim` for a record that carries its own time in ``field`` (the same content at
    the same instant is the same record written twice), None for one that carries none."""
    value = record.get(field) if isinstance(record, dict) else None
    return verbatim(record) if value not in (None, "") else None


class RecordIds:
    """The records of one input seen so far, by key: where each was first seen and its digest."""

    def __init__(self, source: str) -> None:
        self.source = source
        self._seen: dict[str, tuple[str, str, Any]] = {}  # key -> (origin, digest, record)

    def repeat(self, origin: str, key: str | None, record: Any) -> str | None:
        """None when the record is new (or has no key); the reason to skip it when it repeats a
        record already seen. Raises :class:`TranscriptError` when the key was seen with other
        content."""
        if key is None:
            return None
        digest = _digest(record)
        first = self._seen.get(key)
        if first is None:
            self._seen[key] = (origin, digest, record)
            return None
        first_origin, first_digest, first_record = first
        if first_digest != digest:
            raise TranscriptError(
                self.source,
                None,
                f"{origin} and {first_origin} carry the same {_what(key)} with different content "
                f"({_difference(first_record, record)}): which one the harness meant cannot be "
                "told, so nothing is imported (remove or correct one of them)",
            )
        return f"repeats {first_origin} (the same {_what(key)}, the same content): skipped"


def _what(key: str) -> str:
    return "content" if key.startswith("content ") else key


def _digest(record: Any) -> str:
    return hashlib.sha256(msgspec.json.encode(record, order="sorted")).hexdigest()


def _difference(first: Any, second: Any) -> str:
    if isinstance(first, dict) and isinstance(second, dict):
        fields = sorted(k for k in first.keys() | second.keys() if first.get(k) != second.get(k))
        return "they differ in " + ", ".join(f"`{k}`" for k in fields[:8])
    return "they differ"
