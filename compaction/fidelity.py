"""The fidelity gate: the eight sections present and not empty by accident, and the verbatim
identifiers of the shadowed span retained at no less than a configured ratio."""

from __future__ import annotations

import re
from collections.abc import Sequence

from compaction.events import Fidelity
from compaction.identifiers import Identifiers, retained
from compaction.instruction import SECTIONS

# One heading line: a Markdown heading or a numbered item, its title the rest of the line. Kept
# linear on purpose: the summary is model output, and a title pattern with several adjacent
# whitespace quantifiers backtracks polynomially on a long run of spaces.
_HEADING = re.compile(r"^[ \t]*(#{1,6}|\d+[.)])[ \t]*(.*)$", re.MULTILINE)
_TRIM = " \t\r\f\v*#:"


def _known(marker: str, title: str) -> str | None:
    """The section a heading names: ours exactly, or one that starts with ours ("Files and Code
    Sections" counts as "Files and Code"), case-insensitive. A numbered item is a heading only when
    it is a name alone or ends with a colon ("3. Files and Code Sections:"), so a list item inside a
    section ("1. Next step is to rerun the tests") does not end it."""
    bare = title.strip(_TRIM).lower()
    prefix_ok = marker.startswith("#") or title.strip(" \t\r\f\v*").endswith(":")
    for name in SECTIONS:
        if bare == name.lower() or (prefix_ok and bare.startswith(name.lower() + " ")):
            return name
    return None


def section_bodies(summary: str) -> dict[str, str]:
    """Body text under each known section heading (``## Name`` or ``1. Name:``); a body runs to the
    next known heading, so numbered lists inside a section stay in it."""
    known = [(m, _known(m.group(1), m.group(2))) for m in _HEADING.finditer(summary)]
    headings = [(m, name) for m, name in known if name is not None]
    bodies: dict[str, str] = {}
    for index, (match, name) in enumerate(headings):
        end = headings[index + 1][0].start() if index + 1 < len(headings) else len(summary)
        bodies[name] = summary[match.end() : end].strip()
    return bodies


def measure_fidelity(summary: str, identifiers: Identifiers, required_ratio: float) -> Fidelity:
    bodies = section_bodies(summary)
    present = tuple(s for s in SECTIONS if bodies.get(s))
    missing_sections = tuple(s for s in SECTIONS if not bodies.get(s))
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
