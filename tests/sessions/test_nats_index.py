"""The index of a JetStream session's commits and the rows a read takes of each commit: every
lookup bisects, and answers as a pass over every commit and every row would."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.sessions.nats import frames
from compaction.sessions.nats.client import Record
from compaction.sessions.nats.index import SubjectIndex
from compaction.sessions.nats.recorders import _within

COUNTS = st.lists(st.integers(min_value=1, max_value=6), max_size=12)
"""Versions held by each commit of a session, in order."""
BOUND = st.none() | st.integers(min_value=-2, max_value=50)


def _index(counts: list[int], gap: int) -> SubjectIndex:
    index = SubjectIndex()
    first = 0
    for position, count in enumerate(counts):
        headers = frames.commit_headers(first, count, chunked=False)
        index.add(Record(seq=10 * (position + 1), subject="s.x", headers=headers, data=b""))
        first += count + gap  # gap > 0: versions missing between commits
    return index


@settings(max_examples=300, deadline=None)
@given(COUNTS, st.integers(min_value=0, max_value=2), BOUND, BOUND)
def test_the_commits_a_read_needs_are_those_holding_a_wanted_version(
    counts: list[int], gap: int, gt: int | None, lte: int | None
) -> None:
    index = _index(counts, gap)

    def wanted(version: int) -> bool:
        return (gt is None or version > gt) and (lte is None or version <= lte)

    expected = [h for h in index.heads if any(wanted(v) for v in range(h.first, h.last + 1))]
    assert index.overlapping(gt, lte) == expected


@settings(max_examples=300, deadline=None)
@given(COUNTS, st.integers(min_value=0, max_value=2), st.integers(min_value=-1, max_value=50))
def test_versions_below_are_counted_as_one_by_one(counts: list[int], gap: int, below: int) -> None:
    index = _index(counts, gap)
    stored = [v for h in index.heads for v in range(h.first, h.last + 1)]
    assert index.count_below(below) == sum(1 for v in stored if v < below)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=20), st.integers(min_value=0, max_value=30), BOUND, BOUND)
def test_the_rows_of_a_commit_within_a_span_are_those_a_filter_keeps(
    first: int, count: int, gt: int | None, lte: int | None
) -> None:
    rows = [(version, "topic", b"state") for version in range(first, first + count)]
    kept = [r for r in rows if (gt is None or r[0] > gt) and (lte is None or r[0] <= lte)]
    assert _within(rows, gt, lte) == kept


class _Commits:
    """A stream as far as :meth:`HeadIndex._start` asks it: the first commit of the subject at
    or after a sequence (other subjects' messages are the gaps between the sequences)."""

    def __init__(self, records: list[Record]) -> None:
        self.records = records
        self.asked = 0

    async def get(self, seq: int, stream: str | None = None, *, subject: str | None = None) -> Record | None:
        self.asked += 1
        return next((r for r in self.records if r.seq >= seq), None)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=40),
    st.lists(st.integers(min_value=1, max_value=9), min_size=40, max_size=40),
    st.integers(min_value=0, max_value=200),
)
def test_the_commit_holding_a_version_is_found_by_bisection_as_by_a_pass(
    counts: list[int], gaps: list[int], version: int
) -> None:
    import asyncio

    from compaction.sessions.nats.index import HeadIndex, _head

    records, seq, first = [], 0, 0
    for count, gap in zip(counts, gaps, strict=False):
        seq += gap
        records.append(Record(seq, "s.x", frames.commit_headers(first, count, chunked=False), b""))
        first += count
    log = _Commits(records)
    index = HeadIndex(log, "s")  # type: ignore[arg-type]
    bound = _head(records[-1])
    found = asyncio.run(index._start("s.x", version, bound))
    expected = next((_head(r) for r in records if _head(r).last >= version), bound)
    assert found == expected
    assert log.asked <= 2 + records[-1].seq.bit_length()  # a bisection, not a pass
    # started after a commit known not to come after the answer (a span's first, for its last)
    earlier = next((_head(r) for r in records if _head(r).last >= version // 2), bound)
    assert asyncio.run(index._start("s.x", version, bound, after=earlier.seq)) == expected
