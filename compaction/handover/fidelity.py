"""The fidelity gate: the eight sections present and not empty by accident, and the verbatim
identifiers of the shadowed span retained at no less than a configured ratio."""

from __future__ import annotations

import re
from collections.abc import Sequence

from compaction.handover.analysis import chars, remembered
from compaction.handover.identifiers import Identifiers, retained
from compaction.sessions.memo import ENTRY_BYTES, STRING_BYTES, LatestOnly
from compaction.vocabulary.events import Fidelity
from compaction.vocabulary.instruction import INSTRUCTION, SECTIONS

# One heading line: a Markdown heading, a numbered item or a bold line, its title the rest of the
# line. Kept linear on purpose: the summary is model output, and a title pattern with several
# adjacent whitespace quantifiers backtracks polynomially on a long run of spaces.
_HEADING = re.compile(r"^[ \t]*(#{1,6}|\d+[.)]|\*\*|__)[ \t]*(.*)$", re.MULTILINE)
_TRIM = " \t\r\f\v*_#:"
_NUMBER = re.compile(r"^(?:\d+|[ivx]+|[a-h])[.)][ \t]*")
_PARENTHESES = re.compile(r"[ \t]*\([^)]*\)$")

SYNONYMS: dict[str, tuple[str, ...]] = {
    "Primary Request and Intent": (
        "primary request",
        "primary requests",
        "user request",
        "user requests",
        "request",
        "requests",
        "intent",
        "user intent",
        "task",
        "tasks asked",
        "goal",
        "goals",
        "objective",
        "objectives",
        "primary goal",
        "original request",
        "all user messages",
        "user messages",
    ),
    "Key Technical Concepts": (
        "key concepts",
        "technical concepts",
        "concepts",
        "technologies",
        "tech stack",
        "key technologies",
        "technical context",
    ),
    "Files and Code": (
        "files",
        "code",
        "relevant files",
        "key files",
        "files changed",
        "files modified",
        "files touched",
        "files and changes",
        "code changes",
        "files and code sections",
    ),
    "Errors and Fixes": (
        "errors",
        "error",
        "errors and solutions",
        "problems",
        "problems and solutions",
        "problem solving",
        "problems solved",
        "issues",
        "issues and fixes",
        "errors encountered",
        "bugs",
        "bugs and fixes",
        "errors and fixes",
    ),
    "Pending Jobs": (
        "pending",
        "pending tasks",
        "pending work",
        "pending items",
        "open tasks",
        "open items",
        "remaining tasks",
        "remaining work",
        "outstanding tasks",
        "todo",
        "todos",
        "to do",
        "to-do",
        "task list",
    ),
    "Current Work": (
        "current state",
        "current status",
        "status",
        "current task",
        "current progress",
        "progress",
        "work in progress",
        "recent work",
    ),
    "Next Step": (
        "next steps",
        "optional next step",
        "optional next steps",
        "next action",
        "next actions",
        "immediate next step",
        "immediate next steps",
    ),
    "Critical Context": (
        "context",
        "important context",
        "key context",
        "additional context",
        "notes",
        "important notes",
        "important details",
        "key details",
        "critical details",
    ),
}
"""Other titles models give the eight sections (lower case, "&" read as "and", numbering, bold
and a trailing parenthesis ignored)."""

_TITLES: dict[str, str] = {
    **{synonym: name for name, synonyms in SYNONYMS.items() for synonym in synonyms},
    **{name.lower(): name for name in SECTIONS},
}


def normalized_title(title: str) -> str:
    """A heading title as matched: no numbering, emphasis, colon or trailing parenthesis; lower
    case, "&" read as "and", single spaces."""
    bare = _NUMBER.sub("", title.strip(_TRIM).lower()).strip(_TRIM)
    bare = _PARENTHESES.sub("", bare).strip(_TRIM)
    return " ".join(bare.replace("&", " and ").split())


def section_named(title: str, *, prefix: bool = True) -> str | None:
    """The section a heading title names: ours, a synonym (:data:`SYNONYMS`), or with ``prefix``
    a title that starts with our name ("Files and Code Sections" counts as "Files and Code")."""
    bare = normalized_title(title)
    if bare in _TITLES:
        return _TITLES[bare]
    if prefix:
        for name in SECTIONS:
            if bare.startswith(name.lower() + " "):
                return name
    return None


def _known(marker: str, title: str) -> str | None:
    """The section a heading line names. A Markdown heading may use any title :func:`section_named`
    knows. A numbered item or a bold line is a heading only when it is one of our names alone or
    ends with a colon ("3. Files and Code Sections:", "**Pending Tasks:**"), so a list item inside a
    section ("1. Next step is to rerun the tests") does not end it."""
    if marker.startswith("#"):
        return section_named(title)
    if marker in ("**", "__") and not title.rstrip(" \t\r\f\v:").endswith(marker):
        return None  # only part of the line is bold
    if title.strip(" \t\r\f\v*_").endswith(":"):
        return section_named(title)
    bare = normalized_title(title)
    return next((name for name in SECTIONS if bare == name.lower()), None)


def section_bodies(summary: str) -> dict[str, str]:
    """Body text under each known section heading (``## Name``, ``1. Name:``, ``**Name:**`` or a
    synonym); a body runs to the next known heading, so numbered lists inside a section stay in it.
    Two headings naming one section ("Errors and fixes", "Problem Solving") share its body. With an
    active analysis the latest summary's are kept (the completion and the gate read the same text)."""
    return dict(_bodies(summary))


def _bodies_size(summary: str, value: dict[str, str]) -> int:
    return ENTRY_BYTES + len(summary) + STRING_BYTES + chars(list(value.values()))


@remembered(lambda budget: LatestOnly(budget, _bodies_size))
def _bodies(summary: str) -> dict[str, str]:
    """:func:`section_bodies`, kept for the latest summary while an analysis is active."""
    known = [(m, _known(m.group(1), m.group(2))) for m in _HEADING.finditer(summary)]
    headings = [(m, name) for m, name in known if name is not None]
    bodies: dict[str, str] = {}
    for index, (match, name) in enumerate(headings):
        end = headings[index + 1][0].start() if index + 1 < len(headings) else len(summary)
        body = summary[match.end() : end].strip()
        bodies[name] = f"{bodies[name]}\n{body}".strip() if name in bodies else body
    return bodies


_PLACEHOLDER_LINE = re.compile(r"^[ \t]*(?:[-*+]|\d+[.)])?[ \t]*\[[^\]\n]*\][ \t.]*$")
_BULLET = re.compile(r"^[ \t]*(?:[-*+]|\d+[.)])?[ \t]*")
ECHO_CHARS = 16
"""A line at least this long that the instruction holds is the instruction repeated."""
INSTRUCTION_TEXT = " ".join(INSTRUCTION.split()).casefold()


def echoes_instruction(line: str) -> bool:
    """Whether a summary line is a bracketed placeholder ("- [Describe the request here]") or
    repeats the instruction (a line of at least :data:`ECHO_CHARS` characters it holds)."""
    if _PLACEHOLDER_LINE.match(line):
        return True
    bare = " ".join(_BULLET.sub("", line).strip("[] \t").split()).casefold()
    return len(bare) >= ECHO_CHARS and bare in INSTRUCTION_TEXT


def heading_section(line: str) -> str | None:
    """The section a summary line heads (as :func:`section_bodies` reads headings), else None."""
    found = _HEADING.match(line)
    return None if found is None else _known(found.group(1), found.group(2))


def hollow(body: str) -> bool:
    """Whether a section body is empty or holds only placeholders and the instruction repeated."""
    return all(echoes_instruction(line) for line in body.splitlines() if line.strip())


def missing_sections(summary: str) -> tuple[str, ...]:
    """The sections with no heading or an empty body (a placeholder or the instruction repeated
    counts as empty), in the instruction's order."""
    bodies = section_bodies(summary)
    return tuple(s for s in SECTIONS if hollow(bodies.get(s, "")))


def measure_fidelity(summary: str, identifiers: Identifiers, required_ratio: float) -> Fidelity:
    bodies = section_bodies(summary)
    present = tuple(s for s in SECTIONS if not hollow(bodies.get(s, "")))
    missing_sections = tuple(s for s in SECTIONS if hollow(bodies.get(s, "")))
    wanted = identifiers.all()
    kept, missing = retained(wanted, summary)
    ratio = 1.0 if not wanted else len(kept) / len(wanted)
    return Fidelity(
        sections_present=present,
        sections_missing=missing_sections,
        identifiers_total=len(wanted),
        identifiers_kept=len(kept),
        retention_ratio=round(ratio, 4),
        missing_identifiers=tuple(missing[:50]),
        required_ratio=required_ratio,
    )


def fidelity_problems(fidelity: Fidelity, require_sections: bool) -> Sequence[str]:
    problems: list[str] = []
    if require_sections and fidelity.sections_missing:
        problems.append(
            "summary is missing or has empty sections: "
            + ", ".join(fidelity.sections_missing)
            + ' (write "(none)" for an empty section)'
        )
    if fidelity.retention_ratio < fidelity.required_ratio:
        sample = ", ".join(fidelity.missing_identifiers[:8])
        problems.append(
            f"summary keeps {fidelity.identifiers_kept}/{fidelity.identifiers_total} verbatim "
            f"identifiers ({fidelity.retention_ratio:.0%}), below the required "
            f"{fidelity.required_ratio:.0%}; missing for example: {sample}"
        )
    return problems
