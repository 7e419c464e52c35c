"""Fidelity and compression of the template summarizer on every public transcript, and the same
retention metric for Claude Code's own summary in the spotter transcript.

Per imported session: one manual compaction (``compact_now``: everything but the task statement and
the newest unit) with the template summarizer and the fidelity gate set to record, not to refuse
(``min_identifier_ratio=0``). Reported: the verbatim identifiers of the shadowed span (paths,
commands, error names, ids; :mod:`compaction.identifiers`) found in the summary, and the compression
ratio = shadowed tokens / framed summary tokens (heuristic meter).

Claude Code: the spotter transcript holds one automatic Claude Code compaction (a
``compact_boundary`` line, then the ``isCompactSummary`` user message). The importer turns it into a
``compact/*`` bracket whose ``compact/summary`` (provider ``claude-code``) shadows everything on the
surface before the boundary. The same extractor and the same verbatim test are applied to that
span and to Claude Code's summary text.

    .venv/bin/python -m benchmarks.bench_fidelity
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from uuid import uuid4

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import compaction  # noqa: F401  (registers compact/* and the foreign-compaction handler)
from benchmarks.common import Result
from compaction.basic import BasicCompactService
from compaction.config import BasicConfig
from compaction.events import CompactSummary
from compaction.identifiers import Identifiers, extract, retained
from compaction.meters import HeuristicMeter
from compaction.sessions.blocks import text_of
from compaction.sessions.importers import import_path
from compaction.sessions.session import Session, project


def transcripts_dir() -> Path:
    default = Path(__file__).resolve().parents[1] / "tests" / "data" / "transcripts"
    return Path(os.environ.get("COMPACTION_TRANSCRIPTS", default)).resolve()


def public_transcripts() -> list[Path]:
    """The same selection as ``tests/conftest.py``: transcript files, no sub-agents, no licences."""
    return sorted(
        p
        for p in transcripts_dir().rglob("*")
        if p.is_file()
        and p.suffix in {".jsonl", ".traj", ".json"}
        and "subagents" not in p.parts
        and "LICENSES" not in p.parts
    )


def label(path: Path, index: int, count: int) -> str:
    name = f"{path.parent.name[-28:]}/{path.name[:28]}"
    return f"{name} #{index + 1}" if count > 1 else name


def copy_of(session: Session) -> Session:
    """The same log under a fresh id, every event pending (the benchmarks compact copies)."""
    copy = Session(uuid4())
    for event in session.events():
        copy.append(event)
    return copy


@dataclass(frozen=True)
class Row:
    name: str
    events: int
    shadowed_nodes: int
    kept: int
    total: int
    shadowed_tokens: int
    summary_tokens: int

    @property
    def retention(self) -> float:
        return 1.0 if not self.total else self.kept / self.total

    @property
    def compression(self) -> float:
        return self.shadowed_tokens / self.summary_tokens


def imported_sessions() -> Iterator[tuple[str, Session]]:
    for path in public_transcripts():
        items = import_path(path)
        for index, item in enumerate(items):
            yield label(path, index, len(items)), item.session


async def template_row(name: str, session: Session) -> Row | None:
    service = BasicCompactService(BasicConfig(min_identifier_ratio=0.0))
    result = await service.compact_now(session)
    if result is None:
        return None
    summary = session.event(result.summary_seq)
    assert isinstance(summary, CompactSummary) and summary.fidelity is not None
    return Row(
        name=name,
        events=result.start_seq,
        shadowed_nodes=len(result.shadowed_seqs),
        kept=summary.fidelity.identifiers_kept,
        total=summary.fidelity.identifiers_total,
        shadowed_tokens=result.shadowed_token_count,
        summary_tokens=result.summary_token_count,
    )


def by_kind(identifiers: Identifiers, text: str) -> str:
    parts = []
    for kind in ("paths", "commands", "errors", "ids"):
        wanted = list(getattr(identifiers, kind))
        kept, _ = retained(wanted, text)
        if wanted:
            parts.append(f"{kind} {len(kept)}/{len(wanted)}")
    paths = list(identifiers.paths)
    by_name = [p for p in paths if p.rstrip("/").rsplit("/", 1)[-1] in text]
    if paths:
        parts.append(f"paths by file name only (a looser test) {len(by_name)}/{len(paths)}")
    return ", ".join(parts)


def foreign_rows(name: str, session: Session) -> Iterator[tuple[Row, str]]:
    """Rows for other harnesses' own compactions found in an imported session."""
    meter = HeuristicMeter()
    for event in session.events():
        if not isinstance(event, CompactSummary) or event.provider in ("template", "scripted"):
            continue
        messages = [m for m in (project(session.event(s)) for s in event.shadowed_seqs) if m]
        identifiers = extract(messages)
        text = text_of(event.summary)
        kept, _ = retained(identifiers.all(), text)
        summary_tokens = event.summary_token_count or meter.messages(
            [m for m in (project(session.event(event.seq + 1)),) if m]
        )
        row = Row(
            name=f"{name} ({event.provider}'s own summary)",
            events=event.seq,
            shadowed_nodes=len(event.shadowed_seqs),
            kept=len(kept),
            total=len(identifiers),
            shadowed_tokens=sum(meter.node_price(session, s) for s in event.shadowed_seqs),
            summary_tokens=summary_tokens,
        )
        yield row, by_kind(identifiers, text)


def table(rows: list[Row]) -> str:
    lines = [
        "| transcript | shadowed nodes | identifiers kept | retention | shadowed tokens "
        "| summary tokens | compression |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.name} | {r.shadowed_nodes:,} | {r.kept:,}/{r.total:,} | {r.retention:.0%} "
            f"| {r.shadowed_tokens:,} | {r.summary_tokens:,} | {r.compression:.1f}x |"
        )
    return "\n".join(lines)


def collect() -> tuple[list[Row], list[tuple[Row, str]]]:
    template: list[Row] = []
    foreign: list[tuple[Row, str]] = []
    for name, session in imported_sessions():
        foreign.extend(foreign_rows(name, session))
        row = asyncio.run(template_row(name, copy_of(session)))
        if row is not None:
            template.append(row)
    return template, foreign


def run() -> list[Result]:
    """Summary rows for ``benchmarks.run`` (informational: no targets)."""
    template, foreign = collect()
    results = [
        Result(
            name="template summarizer, identifier retention (worst transcript)",
            measured=f"{min(r.retention for r in template):.0%}",
            baseline=f"{len(template)} sessions from {len(public_transcripts())} transcripts",
            ratio=min(r.retention for r in template),
            target=None,
            higher_is_better=True,
        ),
        Result(
            name="template summarizer, compression (worst transcript)",
            measured=f"{min(r.compression for r in template):.1f}x",
            baseline="shadowed tokens / framed summary tokens",
            ratio=min(r.compression for r in template),
            target=None,
            higher_is_better=True,
        ),
    ]
    for row, _ in foreign:
        results.append(
            Result(
                name=f"{row.name}: identifier retention",
                measured=f"{row.kept}/{row.total} ({row.retention:.0%})",
                baseline=f"compression {row.compression:.1f}x",
                ratio=row.retention,
                target=None,
                higher_is_better=True,
            )
        )
    return results


def main(argv: list[str] | None = None) -> int:
    template, foreign = collect()
    print("Template summarizer, one manual compaction per imported session:\n")
    print(table(template))
    print("\nOther harnesses' own summaries, same metric:\n")
    print(table([row for row, _ in foreign]))
    for row, kinds in foreign:
        print(f"\n{row.name}: {kinds}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
