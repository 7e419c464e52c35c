"""The fidelity gate's parsers (ARCHITECTURE.md "Beyond the reference" 4): section headings and the
identifier extractor, on model output shapes and on adversarial input sizes (they must stay linear)."""

from __future__ import annotations

import time

from compaction.fidelity import section_bodies
from compaction.identifiers import extract
from compaction.instruction import SECTIONS
from compaction.sessions.blocks import Message, TextBlock, ToolResultBlock


def fast(seconds: float = 0.5) -> _Clock:
    return _Clock(seconds)


class _Clock:
    def __init__(self, limit: float) -> None:
        self.limit = limit

    def __enter__(self) -> None:
        self.started = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        elapsed = time.perf_counter() - self.started
        assert elapsed < self.limit, f"took {elapsed:.2f}s: not linear"


def test_a_numbered_list_item_inside_a_section_does_not_end_it() -> None:
    body = "1. Next step is to rerun the tests\n2. Current work stays here too"
    summary = "\n\n".join(
        f"## {name}\n{body if name == 'Pending Jobs' else '- (none)'}" for name in SECTIONS
    )
    bodies = section_bodies(summary)
    assert list(bodies) == list(SECTIONS)
    assert bodies["Pending Jobs"] == body


def test_numbered_and_decorated_headings_are_sections() -> None:
    summary = (
        "1. Primary Request and Intent:\n- fix it\n"
        "## **Key Technical Concepts:**\n- x\n"
        "3. Files and Code Sections:\n- a.py\n"
        "4. Errors and Fixes\n- none\n"
        "## Current Work ##\n- parsing\n"
    )
    assert section_bodies(summary) == {
        "Primary Request and Intent": "- fix it",
        "Key Technical Concepts": "- x",
        "Files and Code": "- a.py",
        "Errors and Fixes": "- none",
        "Current Work": "- parsing",
    }


def test_heading_parsing_is_linear_on_long_whitespace_runs() -> None:
    lines = ["# a" + " " * 400 + "b", "1. a" + " \t" * 400 + "b", "## x" + " " * 400 + ":" + " " * 400 + "y"]
    with fast():
        assert section_bodies("\n".join(lines)) == {}


def test_error_line_extraction_is_linear_on_blank_runs() -> None:
    output = "ran 3 tests\n" + "\n" * 20_000 + " \n" * 20_000 + "2 failed\nE   KeyError: 'k'\r\nTypeError\r\n"
    message = Message("r", "user", (ToolResultBlock("c1", (TextBlock(output),)),))
    with fast():
        found = extract([message])
    assert list(found.error_lines) == ["KeyError: 'k'", "TypeError"]
    assert list(found.errors) == ["KeyError", "TypeError"]
