"""Each identifier written once: a checkpoint does not list again what it already quotes.

The template lists the span's named paths, its commands, ids and error names so that each is in the
checkpoint verbatim; the completion appendix lists those a summary left out. Many are already in
the checkpoint inside something longer: a directory inside a file's path, a relative path inside
its absolute one, a path or command inside the failing call of Errors and Fixes, a command inside
a longer command. Listing them again costs tokens and tells a reader nothing new, so a listed
identifier that occurs whole elsewhere in the checkpoint is not listed (the identifier is still in
the checkpoint verbatim, where the fidelity gate and the retention measures find it).

"Whole": not inside a longer word or name. ``view`` is not in ``review``, ``router.ex`` not in
``router.exs``; a path is in a longer path that ends with it (``lib/router.ex`` in
``/home/u/p/lib/router.ex``) or starts with it (``/home/u/p`` in ``/home/u/p/lib``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from compaction.handover.starts import Starts

WORDISH = re.compile(r"[\w.-]")
"""A character that would continue a name before it (a letter, digit, ``_``, ``.`` or ``-``)."""
WORD = re.compile(r"\w")
WORD_OR_HYPHEN = re.compile(r"[\w-]")


def occurs(ident: str, text: str) -> bool:
    """Whether ``ident`` occurs whole in ``text`` (see the module): not preceded by a character
    that continues a name (unless it starts with ``/``), not followed by one (``\\w``, ``-``, or
    ``.`` and a word character: an extension) when it ends with one."""
    if not ident or ident not in text:
        return False
    check_before = not ident.startswith("/")
    check_after = ident[-1].isalnum() or ident[-1] in "_-"
    at = text.find(ident)
    while at >= 0:
        end = at + len(ident)
        if not (check_before and at and WORDISH.match(text[at - 1])) and not (
            check_after and _continues(text, end)
        ):
            return True
        at = text.find(ident, at + 1)
    return False


def _continues(text: str, end: int) -> bool:
    """Whether the text from ``end`` continues the name that ends there."""
    if end >= len(text):
        return False
    if WORD_OR_HYPHEN.match(text[end]):
        return True
    return text[end] == "." and end + 1 < len(text) and WORD.match(text[end + 1]) is not None


def unrepeated(items: Sequence[str], elsewhere: str) -> list[str]:
    """``items`` (identifiers listed for their own sake) without those that occur whole in
    ``elsewhere`` (the rest of the checkpoint) or in another, longer item; in their order. So a
    chain (a directory in a path in a command) keeps only its longest link.

    An item can only occur whole in a longer one, so whether it is left out does not depend on
    which others are left out: each item is looked up once among the places where any item may
    start whole (:class:`~compaction.handover.starts.Starts`), not compared with every other. The
    items are read as one text, joined by a character none of them holds (it continues no name,
    so each item's edges are edges there too)."""
    kept = list(dict.fromkeys(items))
    if any(SEPARATOR in item for item in kept):
        texts, own = [*kept, elsewhere], [(index, 0) for index in range(len(kept))]
    else:
        texts, own = [SEPARATOR.join(kept), elsewhere], [(0, at) for at in _offsets(kept)]
    starts = Starts(texts, kept, allowed=_starts)
    return [item for item, place in zip(kept, own, strict=True) if not _quoted(item, place, starts)]


SEPARATOR = "\x00"
START = re.compile(r"(?<![\w.-])|(?=/)")
"""A place where an identifier may start whole: after a character that does not continue a name,
or at a ``/`` (a path's tail may start anywhere)."""


def _offsets(items: list[str]) -> Iterator[int]:
    """Where each of ``items`` starts in their join by :data:`SEPARATOR`."""
    at = 0
    for item in items:
        yield at
        at += len(item) + len(SEPARATOR)


def _starts(text: str) -> Iterator[int]:
    return (found.start() for found in START.finditer(text))


def _quoted(item: str, own: tuple[int, int], starts: Starts) -> bool:
    """Whether ``item``, at place ``own`` of ``starts``, also occurs whole at another place."""
    check_before = not item.startswith("/")
    check_after = bool(item) and (item[-1].isalnum() or item[-1] in "_-")
    for owner, at in starts.where(item):
        if (owner, at) == own:
            continue
        text = starts.texts[owner]
        if (check_before and at and WORDISH.match(text[at - 1])) or (
            check_after and _continues(text, at + len(item))
        ):
            continue
        return True
    return False
