"""Each identifier written once: what counts as quoted whole, and which listed identifiers stay."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.handover.repeats import occurs, unrepeated


@pytest.mark.parametrize(
    ("ident", "text", "whole"),
    [
        ("/home/u/p", "- Edited `/home/u/p/lib/router.ex`", True),  # a directory of a longer path
        ("lib/router.ex", "- Edited `/home/u/p/lib/router.ex`", True),  # a relative path inside it
        ("/scripts/run.sh", "`/home/u/p/plugin/scripts/run.sh`", True),  # an absolute tail
        ("make test", "Bash `cd app && make test`: Error 2", True),  # a command inside a longer one
        ("view", "- Command: `review`", False),  # inside a longer word
        ("router.ex", "`lib/router.exs`", False),  # a longer name
        ("lib/router.ex", "`mylib/router.ex`", False),  # another directory
        ("x.me", "`/w/x.me-next`", False),  # a name with a hyphenated suffix
        ("build", "`/w/build.d/x`", False),  # a name with an extension
        ("src/a.py", "nothing here", False),
    ],
)
def test_an_identifier_is_quoted_whole_only_as_itself(ident: str, text: str, whole: bool) -> None:
    assert occurs(ident, text) is whole


def test_a_chain_of_identifiers_keeps_only_its_longest_link() -> None:
    items = ["/w/p", "/w/p/src", "ls -l /w/p/src", "/w/p/docs/a.md", "view"]
    assert unrepeated(items, "") == ["ls -l /w/p/src", "/w/p/docs/a.md", "view"]


def test_an_identifier_quoted_elsewhere_is_not_listed_and_order_is_kept() -> None:
    items = ["b.py", "/w/a.py", "make", "/w/c.py", "ls"]
    elsewhere = "- Bash `make -j2`: Error 2\n- Edited `/w/a.py`\n- Tools used: Bash x2"
    assert unrepeated(items, elsewhere) == ["b.py", "/w/c.py", "ls"]


def _occurs_by_pattern(ident: str, text: str) -> bool:
    """:func:`occurs` as one regular expression (the rule as first written)."""
    if not ident or ident not in text:
        return False
    before = "" if ident.startswith("/") else r"(?<![\w.-])"
    after = r"(?![\w-]|\.\w)" if ident[-1].isalnum() or ident[-1] in "_-" else ""
    return re.search(before + re.escape(ident) + after, text) is not None


NAMEISH = st.text(alphabet="ab/._-é1 `", max_size=12)


@settings(max_examples=500, deadline=None)
@given(NAMEISH, NAMEISH, NAMEISH)
def test_occurs_is_the_pattern(ident: str, head: str, tail: str) -> None:
    for text in (head + ident + tail, head + tail, ident + head + ident):
        assert occurs(ident, text) == _occurs_by_pattern(ident, text), (ident, text)


def _unrepeated_pairwise(items: list[str], elsewhere: str) -> list[str]:
    """:func:`unrepeated` as first written: each item, shortest first, against ``elsewhere`` and
    every other item still kept."""
    kept = dict.fromkeys(items)
    for item in sorted(kept, key=len):
        if occurs(item, elsewhere) or any(
            item in other and other is not item and occurs(item, other) for other in kept
        ):
            del kept[item]
    return list(kept)


@settings(max_examples=500, deadline=None)
@given(st.lists(NAMEISH, max_size=12), NAMEISH, st.lists(NAMEISH, max_size=4), st.booleans())
def test_unrepeated_is_the_pairwise_rule(
    items: list[str], elsewhere: str, copies: list[str], separated: bool
) -> None:
    # items that extend each other (a directory and its paths, a name and its longer names)
    items = items + [a + b for a, b in zip(items, copies, strict=False)]
    if separated:  # an item holding the joining character: each item is read as its own text
        items.append(f"a\x00{items[0] if items else ''}")
    assert unrepeated(items, elsewhere) == _unrepeated_pairwise(items, elsewhere)


def test_unrepeated_of_many_paths_keeps_each_unquoted_one() -> None:
    paths = [f"src/service/module_{n}.py" for n in range(20_000)]
    dirs = ["src/service", "src", "/w/src/service/module_7.py"]
    elsewhere = "- Edited `src/service/module_3.py` and src/service/module_40.pyc"
    quoted = {"src/service/module_3.py", "src/service/module_7.py"}  # elsewhere; in the /w/ path
    kept = unrepeated([*dirs, *paths], elsewhere)
    assert kept == ["/w/src/service/module_7.py", *(p for p in paths if p not in quoted)]
