"""Results computed once per object, kept by the object's identity.

:class:`IdentityCache`: a value per object (an event's hash, a message's facts or identifiers),
found by ``id()`` with the object held beside it, so an id is never reused while its entry lives and
nothing is hashed by value. :class:`LatestOnly`: the value for the latest key (a summary text
that the completion and the gate read in turn). :class:`SequenceMemo`: results of a function of a
message sequence.
One compaction asks for the same span's facts and identifiers several times: the template summarizer
renders them, the completion checks the summary against them, the fidelity gate counts them. Each
call gets the span's messages as a new list of the same message objects, so the last results are
kept by the identity of those objects (compared in one C-level pass, about 2 ms per 100,000
messages), never by value: nothing stale is recalled for a span whose messages changed.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from compaction.sessions.blocks import Message

K = TypeVar("K")
T = TypeVar("T")

__all__ = ["IdentityCache", "LatestOnly", "SequenceMemo"]


class IdentityCache(Generic[K, T]):
    """``compute(obj)``, once per object while it is kept; past ``limit`` objects it starts over.
    For immutable objects only (what ``compute`` saw must be what a later caller would see)."""

    def __init__(self, compute: Callable[[K], T], limit: int) -> None:
        self.compute = compute
        self.limit = limit
        self._kept: dict[int, tuple[K, T]] = {}

    def __call__(self, obj: K) -> T:
        kept = self._kept.get(id(obj))
        if kept is not None and kept[0] is obj:
            return kept[1]
        value = self.compute(obj)
        if len(self._kept) >= self.limit:
            self._kept.clear()
        self._kept[id(obj)] = (obj, value)
        return value

    def __len__(self) -> int:
        return len(self._kept)

    def clear(self) -> None:
        self._kept.clear()


class LatestOnly(Generic[K, T]):
    """``compute(key)`` for the latest key only (keys compared by equality). Thread-safe: the
    entry is read once per call and replaced whole, so two keys' values never mix."""

    def __init__(self, compute: Callable[[K], T]) -> None:
        self.compute = compute
        self._entry: tuple[K, T] | None = None

    def __call__(self, key: K) -> T:
        entry = self._entry
        if entry is None or entry[0] != key:
            entry = self._entry = (key, self.compute(key))
        return entry[1]

    def clear(self) -> None:
        self._entry = None


class SequenceMemo(Generic[T]):
    """The last ``size`` results, each kept with the tuple of messages it was computed from."""

    def __init__(self, size: int = 2) -> None:
        self.size = size
        self._entries: list[tuple[tuple[Message, ...], T]] = []

    def recall(self, messages: Sequence[Message]) -> T | None:
        for kept, value in self._entries:
            if len(kept) == len(messages) and all(map(operator.is_, kept, messages)):
                return value
        return None

    def keep(self, messages: Sequence[Message], value: T) -> T:
        self._entries = [(tuple(messages), value), *self._entries[: self.size - 1]]
        return value

    def clear(self) -> None:
        self._entries = []
