"""Which commit messages hold which versions of a session: an index read from commit headers.

Every read of a session's events starts here. The index of a subject lists its commit messages
(stream sequence, first version, count) in order; it is read once with a headers-only pass and then
extended, never re-read: a subject's commits are immutable and append-only (a version is stored
once, by the commit whose expected subject sequence held). A read then fetches exactly the commits
that overlap the versions it wants, from the first to the last of them, in one ordered pass
(:meth:`~compaction.sessions.nats.client.JetStreamLog.scan`), so a lazy load of a span of a long
session costs that span, not the session.

A read below the highest version the index already holds asks the server nothing more; any other
asks the stream's leader for the subject's last commit (the leader, not a replica that may lag:
what it holds is what the stream holds) and reads the headers of the commits after the indexed ones.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

from compaction.sessions.nats import frames
from compaction.sessions.nats.client import JetStreamLog, Record

MAX_SUBJECTS = 1024
"""Subjects whose index a recorder keeps (all of them dropped past this: read again when asked)."""


@dataclass(frozen=True)
class Head:
    """One commit message of a subject: its stream sequence and the versions it holds."""

    seq: int
    first: int
    count: int

    @property
    def last(self) -> int:
        return self.first + self.count - 1


@dataclass
class SubjectIndex:
    """The commits of one subject, in stream order (versions increase with the sequence). Every
    lookup bisects: a session saved step by step has tens of thousands of commits, and a lazy load
    asks for a span of it at a time."""

    heads: list[Head] = field(default_factory=list)
    firsts: list[int] = field(default_factory=list)  # each head's first version, for bisecting
    lasts: list[int] = field(default_factory=list)  # each head's last version
    totals: list[int] = field(default_factory=list)  # versions held by the heads up to each one

    @property
    def top_seq(self) -> int:
        return self.heads[-1].seq if self.heads else 0

    @property
    def top_version(self) -> int:
        return self.heads[-1].last if self.heads else -1

    def add(self, record: Record) -> None:
        first, count = frames.header_range(record.headers)
        self.heads.append(Head(record.seq, first, count))
        self.firsts.append(first)
        self.lasts.append(first + count - 1)
        self.totals.append((self.totals[-1] if self.totals else 0) + count)

    def overlapping(self, gt: int | None, lte: int | None) -> list[Head]:
        """The commits holding a version in ``(gt, lte]``, in order."""
        lo = 0 if gt is None else bisect_right(self.lasts, gt)
        hi = len(self.heads) if lte is None else bisect_right(self.firsts, lte, lo=lo)
        if gt is not None and lte is not None and lte <= gt:
            return []  # an empty span
        return self.heads[lo:hi]

    def count_below(self, below: int) -> int:
        """How many stored versions are ``< below``."""
        end = bisect_left(self.lasts, below)
        total = self.totals[end - 1] if end else 0
        if end < len(self.heads):
            head = self.heads[end]
            total += max(0, min(head.last + 1, below) - head.first)
        return total


class HeadIndex:
    """The :class:`SubjectIndex` of every subject a recorder has read (see the module)."""

    def __init__(self, log: JetStreamLog, stream: str) -> None:
        self.log = log
        self.stream = stream
        self._subjects: dict[str, SubjectIndex] = {}

    async def of(self, subject: str, *, covering: int | None = None) -> SubjectIndex:
        """The subject's index, current as the leader sees it (or, with ``covering``, without
        asking when it already holds that version)."""
        index = self._subjects.get(subject)
        if index is not None and covering is not None and index.top_version >= covering:
            return index
        top = await self.log.last(subject, self.stream)
        if index is None or top is None or top.seq < index.top_seq:
            index = SubjectIndex()  # new, or the stream was reset under this handle
            if len(self._subjects) >= MAX_SUBJECTS:
                self._subjects.clear()
            self._subjects[subject] = index
        if top is not None and top.seq > index.top_seq:
            after = await self.log.scan(
                subject, index.top_seq + 1, upto=top.seq, headers_only=True, stream=self.stream
            )
            for record in after:
                if record.seq > index.top_seq:  # another call on this loop may have added it
                    index.add(record)
        return index

    def forget(self, subject: str) -> None:
        self._subjects.pop(subject, None)
