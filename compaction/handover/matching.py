"""The tolerant match by which a summary mentions an ask, a task or an error line: whitespace and
case normalized, the first :data:`MATCH_PREFIX` characters of the text looked for."""

from __future__ import annotations

from compaction.handover.analysis import remembered, text_size
from compaction.sessions.memo import ValueMemo

MATCH_PREFIX = 60
"""Characters of a normalized ask, task or error line that must appear in a summary to count."""


def normalized(text: str) -> str:
    return " ".join(text.split()).casefold()


def mentions(summary: str, text: str, *, prepared: bool = False) -> bool:
    """Whether ``text`` (an ask, task or error line) is in ``summary``: whitespace and case
    normalized, its first :data:`MATCH_PREFIX` characters (the whole text when shorter)."""
    haystack = summary if prepared else normalized(summary)
    found = needle(text)
    return bool(found) and found in haystack


@remembered(lambda budget: ValueMemo(budget, text_size))
def needle(text: str) -> str:
    """What :func:`mentions` looks for: ``text`` normalized, its first :data:`MATCH_PREFIX`
    characters (with an active analysis once per text: the same asks and error lines are looked
    for in every summary)."""
    return normalized(text)[:MATCH_PREFIX].rstrip()
