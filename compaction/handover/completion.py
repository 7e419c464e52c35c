"""Completing a summary before the fidelity gate, so model summaries pass by construction.

A model (or a user's own :class:`~compaction.vocabulary.summarizer.Summarizer`) answers with whatever it
wrote. Before the gate, the compaction measures what that text missed of the shadowed span (the
eight sections, the verbatim identifiers, and, from :mod:`compaction.handover.facts`, the user's asks, the
open tasks and the errors met) and completes it, as ``BasicConfig.completion`` says:

    appendix   (default) a deterministic "Verbatim references" block appended inside the same
               checkpoint, plus a heading for every section the text lacks; no model call
    repair     one more request to the summarizer: its draft, and the list of what is missing
    both       the repair, then the appendix for whatever the repaired text still misses
    off        the text as written (the gate may refuse it)

The appendix carries what the gate needs and, within its budget, what else the summary missed; with
both gates off (``require_sections=False``, ``min_identifier_ratio=0``) it adds nothing, so a
summarizer's text is committed as written, exactly as with ``off`` (and ``both`` stops after the
repair).

The result records what the model wrote and what was added (:class:`~compaction.vocabulary.events.Completion`
on ``compact/summary``), so the audit shows both.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Container, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import msgspec

from compaction.errors import SummarizerError, error_chain
from compaction.handover.facts import SpanFacts, span_facts
from compaction.handover.failures import ErrorFact
from compaction.handover.fidelity import (
    echoes_instruction,
    heading_section,
    measure_fidelity,
    missing_sections,
)
from compaction.handover.identifiers import (
    ELLIPSIS,
    Identifiers,
    extract,
    merged,
    retained,
    word_head,
    word_tail,
)
from compaction.handover.repeats import unrepeated
from compaction.handover.retention import missing_from
from compaction.sessions.blocks import Message, Source, TextBlock, text_of
from compaction.vocabulary.checkpoint import is_checkpoint
from compaction.vocabulary.config import CompletionMode
from compaction.vocabulary.events import Completion
from compaction.vocabulary.instruction import CLOSE_TAG, INSTRUCTION, INSTRUCTION_PLUGIN, OPEN_TAG, SECTIONS
from compaction.vocabulary.summarizer import Summarizer, SummaryOutput, SummaryRequest

log = logging.getLogger("compaction")

APPENDIX_TITLE = "Verbatim references"
APPENDIX_NOTE = (
    "(added by the compaction, not the summarizer: what the summary left out, verbatim from the span)"
)
MAX_ITEM = 300
"""Characters of one user ask, open task or error line kept in the appendix (head ... tail)."""
ERROR_COMMAND_CHARS = 100
"""Characters of the command or input shown beside a failure (head ... tail)."""
MAX_ERRORS = 40
"""Distinct failure lines listed at most; beyond them the unfixed and then the latest are kept."""

_UNSTATED = "(not stated by the summarizer; see Verbatim references)"


@dataclass(frozen=True)
class Gaps:
    """What a summary lacks of its span."""

    sections: tuple[str, ...] = ()
    identifiers: tuple[str, ...] = ()
    user_asks: tuple[str, ...] = ()
    open_tasks: tuple[str, ...] = ()
    errors: tuple[ErrorFact, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.sections or self.identifiers or self.user_asks or self.open_tasks or self.errors)


@dataclass(frozen=True)
class Completed:
    """The completed text, what the summarizer wrote, and the record for ``compact/summary``."""

    text: str
    model_text: str
    record: Completion | None
    output: SummaryOutput
    plan: _Plan | None = None

    def within(self, budget: int) -> Completed:
        """The same completion with its appendix built within ``budget`` characters (what the
        gate needs is always carried; the record counts what was left out)."""
        plan = self.plan
        if plan is None:
            return self
        built = build_appendix(plan.found, plan.facts, plan.wanted, budget=budget, needs=plan.needs)
        block, carried = built.text, built.carried
        record = msgspec.structs.replace(
            plan.base,
            appendix=block,
            added_identifiers=carried.identifiers if block else (),
            added_user_asks=tuple(clip(a) for a in carried.user_asks) if block else (),
            added_open_tasks=tuple(clip(t) for t in carried.open_tasks) if block else (),
            added_errors=tuple(error_lines(carried.errors, commands=plan.wanted.commands)) if block else (),
            added_sections=carried.sections if block else (),
            left_out=built.left_out,
        )
        return Completed(appended(self.model_text, block), self.model_text, record, self.output, plan)


_CALLED = re.compile(r"^[ ]*- [^\s`]+ (?:``[ ]?(.+?)[ ]?``|`([^`]+)`) -> ", re.MULTILINE)
"""An error line's call when it is one of the span's commands (``- Bash `make -j2` -> ...``)."""


def called(text: str) -> set[str]:
    """The commands the error lines of an appendix name as their calls."""
    return {double or single for double, single in _CALLED.findall(text)}


_KINDS = {"Paths": "paths", "Commands": "commands", "Error names": "errors", "Ids": "ids", "Other": "ids"}
_LISTED = re.compile(r"^- (Paths|Commands|Error names|Ids|Other): (.+)$", re.MULTILINE)
_CODE = re.compile(r"``[ ]?(.+?)[ ]?``|`([^`]+)`")


def listed(text: str) -> Identifiers:
    """The identifiers a "Verbatim references" block in ``text`` lists (as :func:`appendix` wrote)."""
    found = Identifiers()
    start = text.find(f"## {APPENDIX_TITLE}\n")
    if start < 0:
        return found
    for kind, items in _LISTED.findall(text[start:]):
        group = getattr(found, _KINDS[kind])
        for double, single in _CODE.findall(items):
            group[double or single] = None
    for command in called(text[start:]):  # not listed again: named by an error line
        found.commands[command] = None
    return found


def carried(messages: Sequence[Message]) -> Identifiers:
    """The identifiers a prior checkpoint in the span carries: its text read as the agent's (so its
    paths count) and its own "Verbatim references". A summary that merges it must keep them, or
    the completion carries them on."""
    prior = [m for m in messages if is_checkpoint(m)]
    agent = extract(msgspec.structs.replace(m, role="assistant") for m in prior)
    return merged(agent, *(listed(text_of(m.content)) for m in prior))


@dataclass(frozen=True)
class SpanReading:
    """What the completion needs of a span: its handover facts, the identifiers the fidelity gate
    counts (:func:`extract` of its messages) and those its prior checkpoints carry. Read from the
    messages (:meth:`of`), or given by the session's folds when the messages were not fetched."""

    facts: SpanFacts
    identifiers: Identifiers
    prior: Identifiers = field(default_factory=Identifiers)

    @classmethod
    def of(cls, messages: Sequence[Message]) -> SpanReading:
        return cls(span_facts(messages), extract(messages), carried(messages))

    def wanted(self) -> Identifiers:
        """Every identifier the completion may add for the span (:func:`span_identifiers`)."""
        return merged(self.identifiers, self.facts.identifiers, self.prior)


@runtime_checkable
class RendersFacts(Protocol):
    """A summarizer that can write its summary from the span's handover facts alone (the
    template): a compaction whose span the session's folds answer hands it the request without
    the span's messages (only the protected task statement leading it) and the span's facts."""

    async def summarize_facts(self, request: SummaryRequest, facts: SpanFacts) -> SummaryOutput | None:
        """The summary of a span of ``facts`` (``request.messages``: at most the lead); None when
        the span's messages are needed after all (the request is then sent whole)."""


def span_identifiers(
    messages: Sequence[Message], facts: SpanFacts | None = None, gate: Identifiers | None = None
) -> Identifiers:
    """Every identifier the completion may add for ``messages``: the gate's (:func:`extract`, or
    ``gate`` when the caller found it already), the span facts', and those prior checkpoints carry.
    The audit checks appendices against this.

    Without ``facts`` the span's facts are not read: their identifiers are :func:`extract` of the
    span's messages that are not checkpoints, which the gate's already hold (a union per message),
    so they add nothing (the audit of a 100,000-message span skipped 2 s of reading)."""
    own = gate if gate is not None else extract(messages)
    if facts is None:
        return merged(own, carried(messages))
    return SpanReading(facts, own, carried(messages)).wanted()


def gaps(summary: str, facts: SpanFacts, wanted: Identifiers | None = None) -> Gaps:
    """What ``summary`` misses: sections (by the gate's tolerant reading), identifiers (verbatim, as
    the gate counts them: ``wanted``, default the span facts'), and the user asks, open tasks and
    errors :func:`~compaction.handover.retention.missing_from` reports."""
    missing = missing_from(summary, facts)
    _, lost = retained((wanted if wanted is not None else facts.identifiers).all(), summary)
    identifiers = tuple(dict.fromkeys([*missing.identifiers, *lost]))
    return Gaps(
        sections=missing_sections(summary),
        identifiers=tuple(retained(identifiers, summary)[1]),
        user_asks=missing.user_asks,
        open_tasks=missing.open_tasks,
        errors=missing.errors,
    )


def clip(text: str, limit: int = MAX_ITEM) -> str:
    """One line of at most about ``limit`` characters: head and tail with the elision marked."""
    line = " ".join(text.split())
    if len(line) <= limit:
        return line
    half = limit // 2
    head = word_head(line, half).removesuffix(" " + ELLIPSIS)  # a cut word keeps its mark
    tail = word_tail(line, half).removeprefix(ELLIPSIS + " ")
    return f"{head} [...] {tail}"


def error_line(error: ErrorFact, times: int = 1) -> str:
    """``tool: command -> first line (state)``, with ``×times`` when the same line came back."""
    return _call_line([(error, times)])


def _call_line(lines: Sequence[tuple[ErrorFact, int]], commands: Container[str] = ()) -> str:
    """One call's failures on one line: ``tool: command -> line (state); line ×2 (state)``; the
    command is left out when every line quotes it (``Command `make` exited with code 2``), and
    written whole in backticks when it is one of the span's ``commands`` (``tool `command` ->``:
    the Commands list need not repeat it, :func:`listed` reads it back)."""
    first = lines[0][0]
    quoted = not first.command or all(first.command in e.first_line for e, _ in lines)
    if quoted:
        where = first.tool
    elif first.command in commands:
        where = f"{first.tool} {_code(first.command)}"
    else:
        where = f"{first.tool}: {clip(first.command, ERROR_COMMAND_CHARS)}"
    said = [f"{clip(e.first_line)}{f' ×{times}' if times > 1 else ''} ({_state(e)})" for e, times in lines]
    return f"{where} -> " + "; ".join(said)


def _state(error: ErrorFact) -> str:
    return "fixed later" if error.fixed else "not fixed"


def _distinct(errors: Sequence[ErrorFact]) -> list[tuple[ErrorFact, int]]:
    """Each distinct first informative line once, in the order met: its latest error (call and
    state) and how many times it came."""
    groups: dict[str, list[ErrorFact]] = {}
    for error in errors:
        groups.setdefault(error.first_line, []).append(error)
    return [(group[-1], len(group)) for group in groups.values()]


def _split(distinct: list[tuple[ErrorFact, int]], most: int) -> tuple[list[int], list[int]]:
    """The indexes of ``distinct`` listed (in order) and left out: beyond ``most``, the unfixed
    are kept first, then the latest."""
    ranked = sorted(range(len(distinct)), key=lambda i: (distinct[i][0].fixed, -i))
    return sorted(ranked[:most]), ranked[most:]


def error_lines(
    errors: Sequence[ErrorFact], most: int = MAX_ERRORS, *, commands: Container[str] = ()
) -> list[str]:
    """Each distinct first informative line, in the order met, at most ``most`` of them
    (:func:`errors_left` counts the rest), one line per call (:func:`error_line`: the lines of
    the same tool and command after it, each with its state)."""
    distinct = _distinct(errors)
    listed, _ = _split(distinct, most)
    calls: dict[tuple[str, str], list[tuple[ErrorFact, int]]] = {}
    for index in listed:
        error, _ = distinct[index]
        calls.setdefault((error.tool, error.command), []).append(distinct[index])
    return [_call_line(lines, commands) for lines in calls.values()]


def errors_left(errors: Sequence[ErrorFact], most: int = MAX_ERRORS) -> str:
    """The line that counts what :func:`error_lines` leaves out ("" when it lists them all)."""
    distinct = _distinct(errors)
    _, left = _split(distinct, most)
    if not left:
        return ""
    failures = sum(distinct[i][1] for i in left)
    return f"... and {failures} more failures ({len(left)} other lines), in the log"


QUOTED_KINDS = ("Paths", "Error names")
"""The kinds a later reading of the checkpoint finds in its text wherever they are
(:func:`carried`), so they need not be listed when quoted elsewhere; commands and ids are read
from the lists only, so they are always listed."""


def _identifier_lines(wanted: Sequence[str], identifiers: Identifiers, said: str = "") -> list[str]:
    """Missing identifiers grouped by kind, each in backticks (verbatim, so the gate finds it);
    a command that an error line of ``said`` (the rest of the block) names as its call, and a
    path or error name that ``said`` or another listed identifier quotes whole, are not listed
    again."""
    kinds = (
        ("Paths", identifiers.paths),
        ("Commands", identifiers.commands),
        ("Error names", identifiers.errors),
        ("Ids", identifiers.ids),
    )
    left = dict.fromkeys(wanted)
    groups: dict[str, list[str]] = {}
    for label, known in kinds:
        groups[label] = [i for i in left if i in known]
        for i in groups[label]:
            del left[i]
    groups["Other"] = list(left)
    named = called(said)
    groups["Commands"] = [c for c in groups["Commands"] if c not in named]
    for label in QUOTED_KINDS:
        others = [i for other, group in groups.items() if other != label for i in group]
        groups[label] = unrepeated(groups[label], "\n".join([said, *others]))
    return [f"- {label}: " + ", ".join(_code(i) for i in group) for label, group in groups.items() if group]


def _code(text: str) -> str:
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


@dataclass(frozen=True)
class Needs:
    """What the fidelity gate needs of the appendix: the sections the summary lacks (when the gate
    requires them) and the identifiers that lift it to the required ratio. Always carried."""

    sections: tuple[str, ...] = ()
    identifiers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Appendix:
    """An appendix: its text, what it carries, and what its budget left out."""

    text: str
    carried: Gaps
    left: Gaps
    full_sections: tuple[str, ...] = ()
    """The missing sections given the span's facts (the others carry a heading and a placeholder)."""

    @property
    def left_out(self) -> str:
        """What the budget left out, counted ("" when nothing)."""
        return _counted(self.left)


def appendix(
    found: Gaps,
    facts: SpanFacts,
    wanted: Identifiers | None = None,
    *,
    budget: int | None = None,
    needs: Needs = Needs(),
) -> str:
    """The block appended to the summary: the verbatim references it missed, then a heading for
    every missing section (with the span's facts for that section when there are any). With a
    ``budget`` (characters), filled by priority: what the gate ``needs``, then errors, then user
    asks, then the rest; a last line counts what it left out."""
    return build_appendix(found, facts, wanted, budget=budget, needs=needs).text


def build_appendix(
    found: Gaps,
    facts: SpanFacts,
    wanted: Identifiers | None = None,
    *,
    budget: int | None = None,
    needs: Needs = Needs(),
) -> Appendix:
    """:func:`appendix` with what it carries and what it left out."""
    if not found:
        return Appendix("", Gaps(), Gaps())
    if budget is None:
        carried, left, full = found, Gaps(), found.sections
    else:
        carried, left, full = _within(found, facts, budget, needs)
    text = _render(carried, facts, wanted, full, _counted(left))
    return Appendix(text, carried, left, full)


HEADER_CHARS = len(APPENDIX_TITLE) + len(APPENDIX_NOTE) + 40
"""The appendix's own lines (title, note, group labels), charged once against a budget."""
_PLACEHOLDER = "- (not stated by the summarizer)"


def _within(found: Gaps, facts: SpanFacts, budget: int, needs: Needs) -> tuple[Gaps, Gaps, tuple[str, ...]]:
    """``(carried, left, full sections)`` of ``found`` within ``budget`` characters, by priority:
    the gate's needs (always), errors (unfixed first, then the latest), user asks, open tasks, the
    other identifiers, the other sections, the span's facts under each missing section."""
    room = budget - HEADER_CHARS
    sections = [s for s in found.sections if s in needs.sections]
    needed = set(needs.identifiers)
    identifiers = [i for i in found.identifiers if i in needed]
    room -= sum(len(s) + len(_PLACEHOLDER) + 5 for s in sections)
    room -= sum(len(i) + 4 for i in identifiers)
    lines: set[str] = set()  # the first lines of the errors carried
    distinct = _distinct(found.errors)
    ranked, _ = _split(distinct, MAX_ERRORS)
    for index in sorted(ranked, key=lambda i: (distinct[i][0].fixed, -i)):
        error, times = distinct[index]
        cost = len(error_line(error, times)) + 6
        if cost <= room:
            room -= cost
            lines.add(error.first_line)
    asks = _fill([(a, len(clip(a)) + 6) for a in found.user_asks], room)
    room -= sum(len(clip(a)) + 6 for a in asks)
    tasks = _fill([(t, len(clip(t)) + 6) for t in found.open_tasks], room)
    room -= sum(len(clip(t)) + 6 for t in tasks)
    others = _fill([(i, len(i) + 4) for i in found.identifiers if i not in needed], room)
    room -= sum(len(i) + 4 for i in others)
    extra = _fill([(s, len(s) + len(_PLACEHOLDER) + 5) for s in found.sections if s not in sections], room)
    room -= sum(len(s) + len(_PLACEHOLDER) + 5 for s in extra)
    chosen = [s for s in found.sections if s in sections or s in extra]
    full = _fill([(s, len(_section_body(s, facts, ())) - len(_PLACEHOLDER)) for s in chosen], room)
    kept_errors = tuple(e for e in found.errors if e.first_line in lines)
    carried_identifiers = {*identifiers, *others}
    carried = Gaps(
        sections=tuple(chosen),
        identifiers=tuple(i for i in found.identifiers if i in carried_identifiers),
        user_asks=tuple(asks),
        open_tasks=tuple(tasks),
        errors=kept_errors,
    )
    asked, tasked = set(asks), set(tasks)
    left = Gaps(
        sections=tuple(s for s in found.sections if s not in chosen),
        identifiers=tuple(i for i in found.identifiers if i not in carried_identifiers),
        user_asks=tuple(a for a in found.user_asks if a not in asked),
        open_tasks=tuple(t for t in found.open_tasks if t not in tasked),
        errors=tuple(e for e in found.errors if e.first_line not in lines),
    )
    return carried, left, tuple(full)


def _fill(items: Sequence[tuple[str, int]], room: int) -> list[str]:
    """The items, in order, that fit in ``room`` characters one after another (a long one skipped
    lets a shorter one after it in)."""
    chosen: list[str] = []
    for item, cost in items:
        if cost <= room:
            chosen.append(item)
            room -= cost
    return chosen


def _counted(left: Gaps) -> str:
    """``3 errors, 1 user ask, 14 identifiers`` ("" when nothing)."""
    counts = (
        (len(_distinct(left.errors)), "error line", "error lines"),
        (len(left.user_asks), "user ask", "user asks"),
        (len(left.open_tasks), "open task", "open tasks"),
        (len(left.identifiers), "identifier", "identifiers"),
        (len(left.sections), "section", "sections"),
    )
    return ", ".join(f"{n} {one if n == 1 else many}" for n, one, many in counts if n)


LEFT_OUT = "- Left out for space (in the log): "


def _render(
    found: Gaps,
    facts: SpanFacts,
    wanted: Identifiers | None,
    full: Sequence[str],
    left_out: str,
) -> str:
    """The block: the references the summary missed, then the missing sections. What a section
    filled from the span's facts lists (the asks, the open tasks, the errors, the files) is not
    listed again among the references, and a path or error name the block already quotes whole
    is not listed (:mod:`compaction.handover.repeats`)."""
    known = wanted if wanted is not None else facts.identifiers
    bodies = {
        s: _section_body(s, facts, known.commands) if s in full else _PLACEHOLDER for s in found.sections
    }
    filled = "\n".join(bodies.values())
    references: list[str] = []
    if found.user_asks and not all(f"- {clip(a)}\n" in filled + "\n" for a in found.user_asks):
        references.append("- User asks:")
        references += [f"  - {clip(ask)}" for ask in found.user_asks]
    if found.open_tasks and not all(f"- {clip(t)}\n" in filled + "\n" for t in found.open_tasks):
        references.append("- Open tasks:")
        references += [f"  - {clip(task)}" for task in found.open_tasks]
    lines = [*error_lines(found.errors, commands=known.commands), *filter(None, [errors_left(found.errors)])]
    if found.errors and not all(f"- {line}\n" in filled + "\n" for line in lines):
        references.append("- Errors:")
        references += [f"  - {line}" for line in lines]
    said = "\n".join([*references, filled])
    references += _identifier_lines(found.identifiers, known, said)
    if left_out:
        references.append(LEFT_OUT + left_out)
    parts: list[str] = []
    if references:
        parts.append("\n".join([f"## {APPENDIX_TITLE}", APPENDIX_NOTE, *references]))
    parts += [f"## {section}\n" + body for section, body in bodies.items()]
    return "\n\n".join(parts)


def _section_body(section: str, facts: SpanFacts, commands: Container[str]) -> str:
    """A missing section's body, from what the span shows (never invented)."""
    lines: list[str] = []
    if section == SECTIONS[0] and facts.user_asks:
        lines = [f"- {clip(a)}" for a in facts.user_asks]
    elif section == "Files and Code":
        lines = [
            f"- {_code(path)} ({how})"
            for how, paths in (
                ("edited", facts.files_edited),
                ("created", facts.files_created),
                ("read", facts.files_read),
            )
            for path in paths
        ]
    elif section == "Errors and Fixes":
        lines = [f"- {line}" for line in error_lines(facts.errors, commands=commands)]
    elif section == "Pending Jobs":
        lines = [f"- {clip(t)}" for t in facts.open_tasks]
    elif section in ("Current Work", "Next Step") and facts.intent:
        lines = [f"- {clip(facts.intent)}"]
    return "\n".join(lines) or f"- {_UNSTATED}"


def appended(text: str, block: str) -> str:
    """The summary with the appendix after a blank line (the summary alone when the appendix is
    empty, the appendix alone when the summary is)."""
    return f"{text}\n\n{block}" if block and text else block or text


@dataclass(frozen=True)
class Echo:
    """What :func:`without_echo` took out of a summarizer's text."""

    text: str
    """The text without placeholder and instruction lines, nor the headings they left empty."""
    sections: tuple[str, ...] = ()
    """The sections whose body was only placeholders or the instruction repeated."""
    lines: int = 0
    """Lines taken out."""
    own: bool = True
    """Whether anything of the summarizer's own is left (besides headings)."""


def without_echo(text: str) -> Echo:
    """A summarizer's text without what it copied of the instruction: bracketed placeholders
    ("- [Describe the primary request here]"), the instruction's lines, and the headings of the
    sections they leave empty (the appendix fills those from the span's facts)."""
    segments: list[tuple[str | None, list[str], int]] = [(None, [], 0)]  # (heading, body, removed)
    for line in text.splitlines():
        if line.lstrip().startswith("#") or heading_section(line) is not None:
            segments.append((line, [], 0))
        elif echoes_instruction(line):
            heading, body, removed = segments[-1]
            segments[-1] = (heading, body, removed + 1)
        else:
            segments[-1][1].append(line)
    kept: list[str] = []
    emptied: list[str] = []
    for heading, body, removed in segments:
        if removed and not any(line.strip() for line in body):
            name = heading_section(heading) if heading is not None else None
            emptied += [name] if name else []
            continue
        kept += ([heading] if heading is not None else []) + body
    own = any(line.strip() for _, body, _ in segments for line in body)
    cleaned = "\n".join(kept).strip()
    lines = sum(removed for _, _, removed in segments)
    return Echo(cleaned if lines else text, tuple(dict.fromkeys(emptied)), lines, own)


def model_text(summary: str, record: Completion | None) -> str:
    """What the summarizer wrote, given the recorded summary text and its completion record."""
    if record is None or not record.appendix:
        return summary
    return summary.removesuffix(record.appendix).removesuffix("\n\n")


REPAIR_INSTRUCTION = (
    "The {open}...{close} block above is your checkpoint of the conversation. It leaves out the "
    "items listed below. Rewrite the whole checkpoint under the same eight-section structure, "
    "keeping everything it says and adding each item below verbatim (exact paths, commands and "
    "error strings) in the section it belongs to. Output only the checkpoint.\n\nMissing:\n"
)


def repair_request(request: SummaryRequest, draft: str, found: Gaps) -> SummaryRequest:
    """One more request: the draft as a framed checkpoint, and the instruction listing what is
    missing. Small by construction (no shadowed messages), so it fits any summarizer's window."""
    framed = Message(
        id=f"{request.compaction_id}/draft",
        role="user",
        content=(TextBlock(f"{OPEN_TAG}\n{draft}\n{CLOSE_TAG}"),),
        source=Source(kind="plugin", plugin=INSTRUCTION_PLUGIN, compaction_id=request.compaction_id),
    )
    items = [f"- section: ## {s}" for s in found.sections]
    items += [f"- user ask: {clip(a)}" for a in found.user_asks]
    items += [f"- open task: {clip(t)}" for t in found.open_tasks]
    items += [f"- error: {line}" for line in error_lines(found.errors)]
    items += [f"- identifier: {i}" for i in found.identifiers]
    header = REPAIR_INSTRUCTION.format(open=OPEN_TAG, close=CLOSE_TAG)
    instruction = f"{INSTRUCTION}\n\n{header}" + "\n".join(items)
    return msgspec.structs.replace(request, messages=(framed,), instruction=instruction)


APPENDIX_SHARE = 0.3
"""The appendix's default budget: this share of the shadowed span's characters, and no less than
:data:`MIN_APPENDIX_CHARS`. The compaction lowers it further when the completed checkpoint would
not be smaller than the span (:meth:`Completed.within`)."""
MIN_APPENDIX_CHARS = 1600
"""The least default budget (about 400 tokens): on a small span the shrink gate, not the share,
bounds the appendix."""


def appendix_budget(facts: SpanFacts) -> int:
    """The default budget of an appendix, in characters, from the span's size."""
    return max(MIN_APPENDIX_CHARS, int(APPENDIX_SHARE * facts.chars))


def gate_needs(text: str, counted: Identifiers, required_ratio: float, *, require_sections: bool) -> Needs:
    """What the gate needs added to ``text``: its missing sections (when required) and the first
    missing counted identifiers, as many as lift it to ``required_ratio``."""
    wanted = counted.all()
    kept, missing = retained(wanted, text)
    short = max(0, math.ceil(required_ratio * len(wanted) - 1e-9) - len(kept))
    return Needs(
        sections=missing_sections(text) if require_sections else (),
        identifiers=tuple(missing[:short]),
    )


async def complete(
    output: SummaryOutput,
    request: SummaryRequest,
    shadowed: Sequence[Message],
    summarizer: Summarizer,
    mode: CompletionMode,
    *,
    identifiers: Identifiers | None = None,
    required_ratio: float = 0.0,
    require_sections: bool = True,
    budget: int | None = None,
    reading: SpanReading | None = None,
) -> Completed:
    """Complete ``output`` against the ``shadowed`` messages as ``mode`` says (see the module).
    ``identifiers``: the ones the gate will count (default: the span's own); ``budget``: the
    appendix's characters (default :func:`appendix_budget`); ``reading``: the span as read
    already (then ``shadowed`` is not read)."""
    text = output.text.strip()
    gated = require_sections or required_ratio > 0
    if mode == "off" or (mode == "appendix" and not gated):
        return Completed(text, text, None, output)  # with the gates off the appendix adds nothing
    echo = without_echo(text)
    text = echo.text
    reading = reading if reading is not None else SpanReading.of(shadowed)
    facts = reading.facts
    counted = identifiers if identifiers is not None else reading.identifiers
    wanted = merged(counted, reading.wanted())
    model_fidelity = measure_fidelity(text, counted, required_ratio)
    found = gaps(text, facts, wanted)
    draft: str | None = None
    repair_error: str | None = None
    repair_usage = None
    if found and mode in ("repair", "both"):
        try:
            repaired = await summarizer.summarize(repair_request(request, text, found))
        except SummarizerError as e:
            repair_error = error_chain(e)
            log.warning("compaction %s: the repair request failed: %s", request.compaction_id, e)
        else:
            if repaired.text.strip():
                echo = without_echo(repaired.text.strip())
                draft, text = output.text.strip(), echo.text  # the draft as the model wrote it
                repair_usage = repaired.usage
                found = gaps(text, facts, wanted)
                model_fidelity = measure_fidelity(text, counted, required_ratio)
    base = Completion(
        mode=mode,
        echoed_sections=echo.sections,
        echoed_lines=echo.lines,
        model_empty=not echo.own,
        model_fidelity=model_fidelity,
        draft=draft,
        repair_usage=repair_usage,
        repair_error=repair_error,
    )
    plan = _Plan(
        found if mode in ("appendix", "both") and gated else Gaps(),
        facts,
        wanted,
        gate_needs(text, counted, required_ratio, require_sections=require_sections),
        base,
    )
    return Completed(text, text, base, output, plan).within(
        appendix_budget(facts) if budget is None else budget
    )


@dataclass(frozen=True)
class _Plan:
    """What an appendix is built from, so a compaction can build it again within a smaller
    budget without asking the summarizer again."""

    found: Gaps
    facts: SpanFacts
    wanted: Identifiers
    needs: Needs
    base: Completion
