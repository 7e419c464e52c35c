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
