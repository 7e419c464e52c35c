"""The fidelity gate: the eight sections present and not empty by accident, and the verbatim
identifiers of the shadowed span retained at no less than a configured ratio."""

from __future__ import annotations

import re
from collections.abc import Sequence

from compaction.events import Fidelity
from compaction.identifiers import Identifiers, retained
from compaction.instruction import SECTIONS

_HEADING = re.compile(r"^#{1,6}\s*(.+?)\s*#*\s*$", re.MULTILINE)


def section_bodies(summary: str) -> dict[str, str]:
    """Body text under each known section heading (case-insensitive heading match)."""
    wanted = {s.lower(): s for s in SECTIONS}
    bodies: dict[str, str] = {}
    matches = list(_HEADING.finditer(summary))
    for index, match in enumerate(matches):
        name = wanted.get(match.group(1).strip().rstrip(":").lower())
        if name is None:
            continue
        end = matches[index + 1].start() if index + 1 < len(matches) else len(summary)
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
            "summary is missing or has empty sections: " + ", ".join(fidelity.sections_missing)
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
