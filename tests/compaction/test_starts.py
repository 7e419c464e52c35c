"""Many strings looked up in one sorted pass: the same answers as ``str.find``, one by one."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.handover import starts as starts_module
from compaction.handover.identifiers import SEARCHED_ONE_BY_ONE, retained
from compaction.handover.starts import Starts

PIECES = st.text(alphabet="ab/._- é1", max_size=8)


def _every_place(texts: list[str], needle: str) -> set[tuple[int, int]]:
    places = set()
    for owner, text in enumerate(texts):
        at = text.find(needle)
        while at >= 0:
            places.add((owner, at))
            at = text.find(needle, at + 1)
    return places


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECES, min_size=1, max_size=4), st.lists(PIECES, max_size=20))
def test_every_place_of_every_needle_is_found(texts: list[str], needles: list[str]) -> None:
    starts = Starts(texts, needles)
    for needle in needles:
        assert set(starts.where(needle)) == (_every_place(texts, needle) if needle else set())


@settings(max_examples=100, deadline=None)
@given(st.lists(PIECES, min_size=1, max_size=3), st.lists(PIECES, max_size=100))
def test_many_heads_and_long_needles_are_found_too(texts: list[str], needles: list[str]) -> None:
    # more heads than FEW_HEADS (every position looked at) and needles past the kept width
    old = starts_module.FEW_HEADS, starts_module.WIDTH
    starts_module.FEW_HEADS, starts_module.WIDTH = 2, 4
    try:
        starts = Starts(texts, needles)
        for needle in needles:
            assert set(starts.where(needle)) == (_every_place(texts, needle) if needle else set())
    finally:
        starts_module.FEW_HEADS, starts_module.WIDTH = old


def test_retained_of_many_identifiers_is_the_search_of_each() -> None:
    summary = "\n".join(f"- `src/pkg/mod_{n}.py` ran `pytest -k t{n}`" for n in range(0, 3000, 3))
    wanted = [f"src/pkg/mod_{n}.py" for n in range(3000)] + ["pytest -k t9", "pytest -k t10", "x"]
    assert len(wanted) > SEARCHED_ONE_BY_ONE
    kept, missing = retained(wanted, summary)
    assert kept == [i for i in wanted if i in summary]
    assert missing == [i for i in wanted if i not in summary]
