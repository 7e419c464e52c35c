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
    complete: bool = True
    """False while it starts at a later commit than the subject's first (read from where a read
    begins, :meth:`HeadIndex.of` with ``above``): the older commits are read when a read needs them."""

    @property
    def top_seq(self) -> int:
        return self.heads[-1].seq if self.heads else 0

    @property
    def top_version(self) -> int:
        return self.heads[-1].last if self.heads else -1

    def add(self, record: Record) -> None:
        self._append(_head(record))

    def _append(self, head: Head) -> None:
        self.heads.append(head)
        self.firsts.append(head.first)
        self.lasts.append(head.last)
        self.totals.append((self.totals[-1] if self.totals else 0) + head.count)

    def prepend(self, records: list[Record]) -> None:
        """Put the subject's older commits (in stream order, all before the first head) in front:
        the index then starts at the subject's first commit."""
        whole = SubjectIndex()
        for record in records:
            whole.add(record)
        for head in self.heads:
            whole._append(head)
        self.heads, self.firsts = whole.heads, whole.firsts
        self.lasts, self.totals = whole.lasts, whole.totals
        self.complete = True

    def holds_above(self, above: int | None) -> bool:
        """Whether it holds every commit with a version above ``above`` (None: every commit)."""
        if self.complete:
            return True
        return above is not None and bool(self.heads) and self.firsts[0] <= above + 1

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


def _head(record: Record) -> Head:
    first, count = frames.header_range(record.headers)
    return Head(record.seq, first, count)


class HeadIndex:
    """The :class:`SubjectIndex` of every subject a recorder has read (see the module)."""

    def __init__(self, log: JetStreamLog, stream: str) -> None:
        self.log = log
        self.stream = stream
        self._subjects: dict[str, SubjectIndex] = {}

    async def of(
        self, subject: str, *, covering: int | None = None, above: int | None = None
    ) -> SubjectIndex:
        """The subject's index, current as the leader sees it (or, with ``covering``, without
        asking when it already holds that version). With ``above``, only the commits holding a
        version above it are needed: a new index then starts at the commit that holds version
        ``above + 1`` (found by bisecting the stream, :meth:`_start`), so a read of a long
        session's tail, after its snapshot, does not read every older commit's header."""
        index = self._subjects.get(subject)
        answers = index is not None and index.holds_above(above)
        if index is not None and answers and covering is not None and index.top_version >= covering:
            return index
        top = await self.log.last(subject, self.stream)
        if index is None or top is None or top.seq < index.top_seq:
            index = SubjectIndex()  # new, or the stream was reset under this handle
            if top is not None and above is not None and above >= 0:
                start = await self._start(subject, above + 1, _head(top))
                if start.seq > 1:  # (one that is the subject's first commit is completed for nothing)
                    index.complete = False
                    index._append(start)
            if len(self._subjects) >= MAX_SUBJECTS:
                self._subjects.clear()
            self._subjects[subject] = index
        elif not answers:
            await self._complete(subject, index)
        if top is not None and top.seq > index.top_seq:
            after = await self.log.scan(
                subject, index.top_seq + 1, upto=top.seq, headers_only=True, stream=self.stream
            )
            for record in after:
                if record.seq > index.top_seq:  # another call on this loop may have added it
                    index.add(record)
        return index

    async def below_start(self, subject: str, gt: int | None, lte: int | None) -> list[Head] | None:
        """The commits holding a version in ``(gt, lte]`` when that span lies below where the
        subject's index starts (an index read from a snapshot's tail, then a lazy load of an old
        span, such as the task statement at version 0): the first and the last found by bisection,
        then one headers-only pass over them, without reading the commits between them and the
        index (nor keeping them). None when the index answers for the span itself."""
        index = self._subjects.get(subject)
        if index is None or index.complete or lte is None or lte >= index.firsts[0]:
            return None
        bound = index.heads[0]
        begin = await self._start(subject, 0 if gt is None else gt + 1, bound)
        if begin.seq >= bound.seq:
            return []
        end = await self._start(subject, lte, bound, after=begin.seq)  # none before begin holds lte
        read = await self.log.scan(subject, begin.seq, upto=end.seq, headers_only=True, stream=self.stream)
        span = SubjectIndex()
        for record in read:
            span.add(record)
        return span.overlapping(gt, lte)

    async def _start(self, subject: str, version: int, bound: Head, *, after: int = 1) -> Head:
        """The subject's first commit whose last version is at least ``version``, at or before
        ``bound`` (``bound`` itself when none before it is) and at or after stream sequence
        ``after`` (the caller knows none before it is): a bisection of the stream sequence, each
        step the leader's first commit of the subject at or after a sequence (about 20 gets for a
        million). The last version of the commit at or after a sequence grows with it."""
        if bound.last < version:
            return bound
        # No commit before lo qualifies; found does, and no commit in [hi, found.seq) does.
        lo, hi, found = after, bound.seq, bound
        while lo < hi:
            middle = (lo + hi) // 2
            probe = await self.log.get(middle, self.stream, subject=subject)
            if probe is None:  # a commit removed meanwhile: read the subject from its start
                first = await self.log.get(1, self.stream, subject=subject)
                return bound if first is None else _head(first)
            head = _head(probe)  # the first commit at or after middle: none between them
            if head.last >= version:
                hi, found = middle, head
            else:
                lo = head.seq + 1
        return found

    async def _complete(self, subject: str, index: SubjectIndex) -> None:
        """Read the commits before the index's first one (up to it: a sequence the subject holds,
        where a read can end) and put them in front."""
        begin = index.heads[0].seq
        read = await self.log.scan(subject, 1, upto=begin, headers_only=True, stream=self.stream)
        if not index.complete and index.heads[0].seq == begin:  # not completed meanwhile
            index.prepend([record for record in read if record.seq < begin])

    def cached(self, subject: str) -> SubjectIndex | None:
        """The subject's index as read so far, if any (nothing asked of the server)."""
        return self._subjects.get(subject)

    def forget(self, subject: str) -> None:
        self._subjects.pop(subject, None)
