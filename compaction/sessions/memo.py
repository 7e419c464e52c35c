"""Results computed once, kept by an owner object within a byte budget (never module-wide).

A memo belongs to one owner (the handover keeps one group per session,
:class:`compaction.handover.analysis.SpanAnalysis`) and goes with it: nothing here is meant to
be held by a module. Every memo of a group charges a shared :class:`Budget` an approximate size
per entry (a fixed :data:`ENTRY_BYTES` plus the characters of the text the entry adds, as the
memo's ``size`` function says); when an entry would take the group past its limit, every memo of
the group starts over (a value is only ever recomputed, never wrong).

- :class:`IdentityMemo`: a value per object (a message's facts, an event's hash), found by
  ``id()`` with the object held beside it, so an id is never reused while its entry lives and
  nothing is hashed by value. For immutable objects only.
- :class:`ValueMemo`: a value per hashable key (an argument string, a text).
- :class:`SequenceMemo`: the last results of a function of a message sequence (values never
  None), recalled while the same message objects come again (compared in one C-level pass, about
  2 ms per 100,000 messages), never by value: nothing stale is recalled for a span whose messages
  changed.
- :class:`LatestOnly`: the value for the latest key (a summary text that the completion and the
  gate read in turn).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, Protocol, TypeVar

from compaction.errors import CompactionConfigError
from compaction.sessions.blocks import Message

K = TypeVar("K")
H = TypeVar("H", bound=Hashable)
T = TypeVar("T")

__all__ = [
    "ENTRY_BYTES",
    "STRING_BYTES",
    "Budget",
    "IdentityMemo",
    "LatestOnly",
    "SequenceMemo",
    "ValueMemo",
    "checked_limit",
]

ENTRY_BYTES = 120
"""What one entry costs beside its text: its table slots (and pair, where kept as one), the value's object."""
STRING_BYTES = 56
"""What one string object costs beside its characters (CPython: 49 to 80 bytes of header)."""
_MISSING = object()


class _Memo(Protocol):
    bytes: int

    def clear(self) -> None: ...


def checked_limit(limit: int) -> int:
    """``limit`` when it is a number of bytes a :class:`Budget` may have (an int, not negative)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise CompactionConfigError(f"a memo budget must be a non-negative number of bytes; got {limit!r}")
    return limit


class Budget:
    """The bytes a group of memos may keep, approximately (each entry's ``size``). Past ``limit``,
    every memo of the group starts over; an entry larger than the whole limit is not kept."""

    def __init__(self, limit: int) -> None:
        self.limit = checked_limit(limit)
        self.used = 0
        self.restarts = 0
        """How many times the group started over (its entries past the limit)."""
        self._memos: list[_Memo] = []

    def join(self, memo: _Memo) -> None:
        self._memos.append(memo)

    def admit(self, size: int) -> bool:
        """Room for an entry of ``size`` bytes, starting the group over when it does not fit beside
        the others; whether the entry may be kept. (The memos test the common case, room left,
        themselves: the hot path of a read-ahead is one new entry per call.)"""
        if self.used + size > self.limit:
            self.start_over()
            if size > self.limit:
                return False
        self.used += size
        return True

    def start_over(self) -> None:
        """Forget every entry of every memo of the group."""
        for memo in self._memos:
            memo.clear()
        self.used = 0
        self.restarts += 1


class IdentityMemo(Generic[K, T]):
    """``compute(obj)`` once per object while its entry is kept (the object held beside it).
    ``size`` is the entry's bytes: a number for entries of one size (nothing called per entry),
    else a function of the object and its value."""

    def __init__(self, budget: Budget, size: Callable[[K, T], int] | int) -> None:
        self.budget = budget
        self._fixed = size if isinstance(size, int) else 0
        self._size_of = None if isinstance(size, int) else size
        self.bytes = 0
        self.computed = 0
        """Values computed (not recalled) since the memo was made."""
        # Two tables by ``id()``, no pair per entry (one object fewer for the garbage collector to
        # walk): the objects, held so that no id is reused while its entry lives (a value found by
        # id is the value of that very object), and their values.
        self._objects: dict[int, K] = {}
        self._values: dict[int, T] = {}
        budget.join(self)

    def get(self, obj: K, compute: Callable[[K], T]) -> T:
        value = self._values.get(id(obj), _MISSING)
        if value is not _MISSING:
            return value  # type: ignore[return-value]
        self.computed += 1
        return self.keep(obj, compute(obj))

    def recall(self, obj: K) -> T | None:
        """The value kept for ``obj``, if any (for values that are never None)."""
        return self._values.get(id(obj))

    def keep(self, obj: K, value: T) -> T:
        """Keep ``value`` for ``obj`` (when the budget admits it); returns it."""
        size_of = self._size_of
        size = self._fixed if size_of is None else size_of(obj, value)
        budget = self.budget
        if budget.used + size <= budget.limit:
            budget.used += size
        elif not budget.admit(size):
            return value
        key = id(obj)
        self._objects[key] = obj
        self._values[key] = value
        self.bytes += size
        return value

    def keep_all(self, objects: Sequence[K], values: Sequence[T]) -> None:
        """:meth:`keep` each value for its object, charged at once: all kept when the budget
        admits them together beside what is kept, else one by one."""
        size_of = self._size_of
        sizes = [self._fixed] * len(objects) if size_of is None else list(map(size_of, objects, values))
        total = sum(sizes)
        budget = self.budget
        if budget.used + total > budget.limit:
            for obj, value in zip(objects, values, strict=True):
                self.keep(obj, value)
            return
        budget.used += total
        self.bytes += total
        keys = list(map(id, objects))
        self._objects.update(zip(keys, objects, strict=True))
        self._values.update(zip(keys, values, strict=True))

    def __len__(self) -> int:
        return len(self._values)

    def clear(self) -> None:
        self._objects.clear()
        self._values.clear()
        self.budget.used -= self.bytes
        self.bytes = 0


class ValueMemo(Generic[H, T]):
    """``compute(key)`` once per key (compared by equality) while its entry is kept."""

    def __init__(self, budget: Budget, size: Callable[[H, T], int]) -> None:
        self.budget = budget
        self.size = size
        self.bytes = 0
        self.computed = 0
        """Values computed (not recalled) since the memo was made."""
        self._kept: dict[H, T] = {}
        budget.join(self)

    def get(self, key: H, compute: Callable[[H], T]) -> T:
        value = self._kept.get(key, _MISSING)
        if value is not _MISSING:
            return value  # type: ignore[return-value]
        self.computed += 1
        return self.keep(key, compute(key))

    def keep(self, key: H, value: T) -> T:
        """Keep ``value`` for ``key`` (when the budget admits it); returns it. A key kept already
        gets the new value at the old one's charge."""
        kept = self._kept
        if key in kept:
            kept[key] = value
            return value
        size = self.size(key, value)
        budget = self.budget
        if budget.used + size <= budget.limit:
            budget.used += size
        elif not budget.admit(size):
            return value
        kept[key] = value
        self.bytes += size
        return value

    @property
    def kept(self) -> dict[H, T]:
        """The entries kept now (read only)."""
        return self._kept

    def __len__(self) -> int:
        return len(self._kept)

    def clear(self) -> None:
        self._kept.clear()
        self.budget.used -= self.bytes
        self.bytes = 0


class SequenceMemo(Generic[T]):
    """The last ``keep`` results, each kept with the tuple of messages it was computed from."""

    def __init__(self, budget: Budget, size: Callable[[T], int], keep: int = 2) -> None:
        self.budget = budget
        self.size = size
        self.keep = keep
        self.bytes = 0
        self.computed = 0
        """Values computed (not recalled) since the memo was made."""
        self._entries: list[tuple[tuple[Message, ...], T, int]] = []
        budget.join(self)

    def get(self, messages: Sequence[Message], compute: Callable[[Sequence[Message]], T]) -> T:
        """The value kept for ``messages`` (:meth:`recall`), else ``compute(messages)``, remembered."""
        value = self.recall(messages)
        if value is not None:
            return value
        self.computed += 1
        return self.remember(messages, compute(messages))

    def recall(self, messages: Sequence[Message]) -> T | None:
        for kept, value, _ in self._entries:
            if len(kept) == len(messages) and all(map(operator.is_, kept, messages)):
                return value
        return None

    def remember(self, messages: Sequence[Message], value: T) -> T:
        """Keep ``value`` for ``messages`` (the oldest entry past ``keep`` forgotten); returns it."""
        size = ENTRY_BYTES + 8 * len(messages) + self.size(value)
        for *_, dropped in self._entries[self.keep - 1 :]:
            self.bytes -= dropped
            self.budget.used -= dropped
        self._entries = self._entries[: self.keep - 1]
        if self.budget.admit(size):
            self._entries.insert(0, (tuple(messages), value, size))
            self.bytes += size
        return value

    def clear(self) -> None:
        self._entries = []
        self.budget.used -= self.bytes
        self.bytes = 0


class LatestOnly(Generic[H, T]):
    """``compute(key)`` for the latest key only (keys compared by equality). The entry is read once
    per call and replaced whole, so two keys' values never mix."""

    def __init__(self, budget: Budget, size: Callable[[H, T], int]) -> None:
        self.budget = budget
        self.size = size
        self.bytes = 0
        self.computed = 0
        """Values computed (not recalled) since the memo was made."""
        self._entry: tuple[H, T] | None = None
        budget.join(self)

    def get(self, key: H, compute: Callable[[H], T]) -> T:
        entry = self._entry
        if entry is not None and entry[0] == key:
            return entry[1]
        self.computed += 1
        value = compute(key)
        self.clear()
        size = self.size(key, value)
        if self.budget.admit(size):
            self._entry = (key, value)
            self.bytes = size
        return value

    def clear(self) -> None:
        self._entry = None
        self.budget.used -= self.bytes
        self.bytes = 0
