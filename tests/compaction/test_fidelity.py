"""The fidelity gate's parsers (docs/compaction.md, "The fidelity gate"): section headings and the
identifier extractor, on model output shapes and on adversarial input sizes (they must stay linear)."""

from __future__ import annotations

import time

from compaction.handover.fidelity import missing_sections, normalized_title, section_bodies, section_named
from compaction.handover.identifiers import extract
from compaction.sessions.blocks import Message, TextBlock, ToolResultBlock
from compaction.vocabulary.instruction import SECTIONS


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
    summary = "\n\n".join(f"## {name}\n{body if name == 'Pending Jobs' else '- (none)'}" for name in SECTIONS)
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


CLAUDE_CODE_STYLE = """Analysis: the user wants the parser ported.

Summary:
1. Primary Request and Intent:
   The user asked to port the parser.
2. Key Technical Concepts:
   - Rust, nom
3. Files and Code Sections:
   - src/parser.rs
4. Errors and fixes:
   - E0308 mismatched types: fixed by a cast
5. Problem Solving:
   Worked around the lifetime issue.
6. All user messages:
   - "port the parser"
7. Pending Tasks:
   - write the docs
8. Current Work:
   Porting the lexer.
9. Optional Next Step:
   Port the error type.
"""


def test_sections_are_matched_tolerantly() -> None:
    """Heading level, numbering, case, bold, a trailing parenthesis and common synonyms."""
    summary = "\n\n".join(
        [
            "# 1. primary request and intent\n- port it",
            "**Key Concepts:**\n- nom",
            "### Files & Code (edited)\n- src/parser.rs",
            "## Errors\n- E0308",
            "## PENDING TASKS\n- docs",
            "__Current State:__\n- lexer",
            "## Next Steps\n- error type",
            "#### 8) Notes\n- keep MSRV 1.70",
        ]
    )
    bodies = section_bodies(summary)
    assert list(bodies) == list(SECTIONS) and missing_sections(summary) == ()
    assert bodies["Pending Jobs"] == "- docs" and bodies["Critical Context"] == "- keep MSRV 1.70"
    assert normalized_title("**3. Files & Code:**") == "files and code"
    assert section_named("Optional Next Step") == "Next Step"
    assert section_named("Lunch plans") is None


def test_claude_codes_own_summary_shape_has_every_section_but_critical_context() -> None:
    bodies = section_bodies(CLAUDE_CODE_STYLE)
    assert missing_sections(CLAUDE_CODE_STYLE) == ("Critical Context",)
    assert "E0308" in bodies["Errors and Fixes"] and "lifetime" in bodies["Errors and Fixes"]
    assert '"port the parser"' in bodies["Primary Request and Intent"]
    assert bodies["Next Step"] == "Port the error type."


def test_a_partly_bold_line_or_a_list_item_synonym_does_not_start_a_section() -> None:
    summary = "## Pending Jobs\n**Errors** were all fixed\n1. Errors\n- more"
    assert list(section_bodies(summary)) == ["Pending Jobs"]
