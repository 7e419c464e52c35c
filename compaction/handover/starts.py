"""Where many short strings occur in some texts, found in one sorted pass instead of one scan of
the texts per string.

A checkpoint of a long span lists tens of thousands of identifiers and runs to megabytes; asking
``ident in text`` of each one scans the text once per identifier, which grows with the square of
the span. :class:`Starts` lists the places of the texts where one of the wanted strings may start
(a place whose first characters begin one of them, optionally only at the places a caller allows),
each with the characters that follow it, sorted. The places where a string occurs are then the
consecutive run of entries that begin with it: one binary search, and as many comparisons as it
has occurrences there. The answers are those of ``str.find``; a string longer than
:data:`WIDTH` is found with ``str.find`` itself.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence

WIDTH = 256
"""Characters kept after each place: a longer string is searched with ``str.find`` instead."""
HEAD = 3
"""Characters of a place that must begin one of the wanted strings for the place to be kept."""
FEW_HEADS = 64
"""Up to this many distinct heads, their places are found with ``str.find`` (one pass of the text
in C per head); beyond, every position of the text is looked at once."""


class Starts:
    """The places of ``texts`` where one of ``wanted`` may begin, sorted by what follows them.
    ``allowed(text)``, when given, yields the only positions of ``text`` worth keeping."""

    def __init__(
        self,
        texts: Sequence[str],
        wanted: Iterable[str],
        allowed: Callable[[str], Iterable[int]] | None = None,
    ) -> None:
        self.texts = texts
        wanted = [w for w in wanted if w]
        self.width = min(WIDTH, max(map(len, wanted), default=0))
        heads = {w[:HEAD] for w in wanted}
        self.short = {h for h in heads if len(h) < HEAD}
        """Strings shorter than a head: every place of their first character is kept."""
        self.heads = heads
        entries: list[tuple[str, int, int]] = []
        for owner, text in enumerate(texts):
            places = self._heads_in(text) if allowed is None else allowed(text)
            for at in places:
                if text[at : at + HEAD] in heads or self._short_at(text, at):
                    entries.append((text[at : at + self.width], owner, at))
        entries.sort()
        self.keys = [key for key, _, _ in entries]
        self.places = [(owner, at) for _, owner, at in entries]

    def _heads_in(self, text: str) -> Iterable[int]:
        """Every position of ``text`` where a head begins (a superset is fine: each is checked)."""
        if len(self.heads) > FEW_HEADS:
            return range(len(text))
        found: set[int] = set()
        for head in self.heads:
            at = text.find(head)
            while at >= 0:
                found.add(at)
                at = text.find(head, at + 1)
        return found

    def _short_at(self, text: str, at: int) -> bool:
        return bool(self.short) and any(text.startswith(s, at) for s in self.short)

    def where(self, needle: str) -> Iterator[tuple[int, int]]:
        """``(text index, position)`` of each kept place where ``needle`` (one of the wanted
        strings: only their heads' places are kept) occurs; every place of a needle longer than
        the kept width, found with ``str.find``."""
        if not needle:
            return
        if len(needle) > self.width:
            yield from self._found(needle)
            return
        index = bisect_left(self.keys, needle)
        while index < len(self.keys) and self.keys[index].startswith(needle):
            yield self.places[index]
            index += 1

    def _found(self, needle: str) -> Iterator[tuple[int, int]]:
        for owner, text in enumerate(self.texts):
            at = text.find(needle)
            while at >= 0:
                yield owner, at
                at = text.find(needle, at + 1)
