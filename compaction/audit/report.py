"""Audit stored sessions and shape the result: the JSON document and the rich terminal report.

The audit reads the raw stored rows (:func:`load_log`), never through ``SessionStore.get``: a
tampered log must still be readable to be reported. A row that cannot be decoded, or a seq with no
row at all, becomes an :class:`UnreadableEvent` placeholder at its seq (so every later seq stays in
place) and fails the ``stored-rows`` check naming the seq.

The document (``--json``)::

    {"sessions": [{"session_id", "events", "passed", "log_checks": [check...],
                   "compactions": [{"compaction_id", "outcome", "strategy", "imported",
                                    "start_seq", ..., "passed", "checks": [check...]}]}],
     "passed": bool, "totals": {...}}

where a check is ``{"name", "passed", "evidence", "applies"}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar
from uuid import UUID

from rich.console import Console, Group, RenderableType
from rich.text import Text

from compaction.audit.checks import DEFAULT_MIN_RATIO, Check, CompactionAudit, audit_events
from compaction.errors import SessionNotFoundError
from compaction.sessions.events import SessionEvent
from compaction.sessions.mapper import UnreadableRow
from compaction.sessions.store import SessionStore
from compaction.terminal import FittedTable

Document = dict[str, Any]

PASS, FAIL, NOT_APPLICABLE = "✓", "✗", "–"


class UnreadableEvent(SessionEvent, frozen=True, kw_only=True):
    """Stands in for a stored row the audit could not read (never stored, never registered)."""

    TYPE: ClassVar[str] = "audit/unreadable"
    problem: str = ""


@dataclass
class StoredLog:
    """A session's stored events, ``events[i].seq == i``, with the seqs that could not be read."""

    session_id: UUID
    events: list[SessionEvent]
    problems: dict[int, str] = field(default_factory=dict)

    def rows_check(self) -> Check:
        if not self.problems:
            return Check("stored-rows", True, f"{len(self.events)} stored rows decode, seqs contiguous")
        seqs = sorted(self.problems)
        detail = "; ".join(f"seq {s}: {self.problems[s]}" for s in seqs[:5])
        more = f"; ... ({len(seqs)} in all)" if len(seqs) > 5 else ""
        return Check("stored-rows", False, f"unreadable or missing rows at seqs {seqs[:12]}: {detail}{more}")


def load_log(store: SessionStore, session_id: UUID) -> StoredLog:
    """Every stored event of a session, without validation; unreadable rows become placeholders
    (the store reads row by row, so one bad row does not hide the others)."""
    events: list[SessionEvent] = []
    problems: dict[int, str] = {}
    for row in store.read_rows(session_id):
        if isinstance(row, UnreadableRow):
            problems[row.seq] = f"the stored {row.type} row cannot be decoded: {row.reason}"
        else:
            events.append(row)
    if not events and not problems:
        raise SessionNotFoundError(session_id)
    return _fill_gaps(session_id, events, problems)


def _fill_gaps(session_id: UUID, events: list[SessionEvent], problems: dict[int, str]) -> StoredLog:
    by_seq = {e.seq: e for e in events}
    last = max([*by_seq, *problems], default=-1)
    filled: list[SessionEvent] = []
    for seq in range(last + 1):
        event = by_seq.get(seq)
        if event is None:
            problem = problems.setdefault(seq, "no stored row at this seq (deleted?)")
            event = UnreadableEvent(seq=seq, problem=problem)
        filled.append(event)
    return StoredLog(session_id, filled, problems)


# ---------------------------------------------------------------- auditing


@dataclass
class SessionAudit:
    log: StoredLog
    compactions: list[CompactionAudit]
    log_checks: list[Check]

    @property
    def session_id(self) -> str:
        return str(self.log.session_id)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.log_checks) and all(a.passed for a in self.compactions)

    def as_json(self) -> Document:
        return {
            "session_id": self.session_id,
            "events": len(self.log.events),
            "passed": self.passed,
            "log_checks": [c.as_json() for c in self.log_checks],
            "compactions": [a.as_json() for a in self.compactions],
        }


def audit_log(
    log: StoredLog, *, min_ratio: float = DEFAULT_MIN_RATIO, keep_first_user: bool = True
) -> SessionAudit:
    audits, log_checks = audit_events(log.events, min_ratio=min_ratio, keep_first_user=keep_first_user)
    return SessionAudit(log, audits, [log.rows_check(), *log_checks])


def audit_session(
    store: SessionStore,
    session_id: UUID,
    *,
    min_ratio: float = DEFAULT_MIN_RATIO,
    keep_first_user: bool = True,
) -> SessionAudit:
    """Audit one stored session from its raw rows."""
    return audit_log(load_log(store, session_id), min_ratio=min_ratio, keep_first_user=keep_first_user)


def audit_document(audits: Iterable[SessionAudit]) -> Document:
    return document_of([a.as_json() for a in audits])


def document_of(sessions: list[Document]) -> Document:
    """The audit document from per-session documents (:meth:`SessionAudit.as_json`)."""
    return {"sessions": sessions, "passed": all(s["passed"] for s in sessions), "totals": totals(sessions)}


def totals(sessions: Sequence[Document]) -> Document:
    compactions = [c for s in sessions for c in s["compactions"]]
    checks = [k for s in sessions for k in s["log_checks"]] + [k for c in compactions for k in c["checks"]]
    return {
        "sessions": len(sessions),
        "sessions_failed": sum(not s["passed"] for s in sessions),
        "compactions": len(compactions),
        "compactions_failed": sum(not c["passed"] for c in compactions),
        "checks": len(checks),
        "checks_failed": sum(not k["passed"] for k in checks),
        "warnings": sum(len(c.get("warnings", ())) for c in compactions),
    }


# ---------------------------------------------------------------- the terminal report


def render_document(document: Document, console: Console, *, verbose: bool = False) -> None:
    """One block per session (a table of its compactions, then failed checks), then a verdict."""
    for session in document["sessions"]:
        console.print(session_block(session, verbose=verbose))
        console.print()
    console.print(verdict(document))


def session_block(session: Document, *, verbose: bool = False) -> RenderableType:
    head = Text.assemble(
        ("session ", "bold"),
        (session["session_id"], "bold cyan"),
        f"  {_n(session['events'], 'event')}, {_n(len(session['compactions']), 'compaction')}  ",
        _badge(session["passed"], sum(len(c.get("warnings", ())) for c in session["compactions"])),
    )
    parts: list[RenderableType] = [head]
    if session["compactions"]:
        parts.append(compaction_table(session["compactions"]))
    parts += _check_lines("log", session["log_checks"], verbose)
    for compaction in session["compactions"]:
        label = compaction["compaction_id"]  # whole: the id `audit --request` takes
        if compaction.get("error"):
            parts.append(Text(f"  ! {label} {compaction['outcome']}: {compaction['error']}", style="yellow"))
        if compaction.get("completion"):
            parts.append(Text(f"  + {label} {completion_line(compaction['completion'])}", style="cyan"))
        parts += [Text(f"  ! {label} warning: {w}", style="yellow") for w in compaction.get("warnings", ())]
        parts += _check_lines(label, compaction["checks"], verbose)
    return Group(*parts)


COLUMNS = ("compaction", "seqs", "outcome", "made by", "shadowed", "tokens", "checks")


def compaction_table(compactions: Sequence[Document]) -> FittedTable:
    """Every value whole (the id is the one ``audit --request`` takes): on a narrow terminal values
    wrap between words, or each compaction becomes a block of lines; never an ellipsis."""
    rows = [
        [
            Text(c["compaction_id"]),
            Text(_span(c)),
            _outcome(c["outcome"]),
            Text(_made_by(c)),
            Text(str(len(c["shadowed_seqs"]))),
            Text(_tokens(c)),
            _checks_cell(c["checks"], len(c.get("warnings", ()))),
        ]
        for c in compactions
    ]
    numeric = tuple(name in ("shadowed", "tokens") for name in COLUMNS)
    return FittedTable("", COLUMNS, rows, numeric)


def completion_line(completion: Document) -> str:
    """What the summarizer wrote and what the compaction added before the gate."""
    kept = completion.get("model_identifiers_kept")
    model = f"the model kept {kept} identifiers" if kept else "the model's text"
    repaired = " after a repair request" if completion.get("repaired") else ""
    added = ", ".join(
        _n(completion[key], key.removeprefix("added_").removesuffix("s").replace("_", " "))
        for key in ("added_identifiers", "added_user_asks", "added_open_tasks", "added_errors")
        if completion.get(key)
    )
    if completion.get("added_sections"):
        added += (", " if added else "") + _n(len(completion["added_sections"]), "section")
    return (
        f"completed by {completion['mode']}: {model}{repaired}; added "
        f"{completion['appendix_chars']} characters"
        + (f" ({added})" if added else "")
        + f" to its {completion['model_chars']}"
    )


def _badge(passed: bool, warnings: int = 0) -> Text:
    noted = f", {_n(warnings, 'warning')}" if warnings else ""
    if passed:
        return Text(f" PASS{noted} ", style="bold black on yellow" if warnings else "bold white on green")
    return Text(f" FAIL{noted} ", style="bold white on red")


def _span(c: Document) -> str:
    """The seqs the compaction's records take: ``start..end`` (a pruning: its record and the
    replacement); an open bracket says so rather than looking cut off."""
    last = c.get("end_seq")
    if last is None:
        last = c.get("replacement_seq")
    return f"{c['start_seq']}..{last}" if last is not None else f"{c['start_seq']} (no end)"


def _outcome(outcome: str) -> Text:
    style = {"committed": "green", "failed": "yellow", "orphaned": "red"}.get(outcome, "")
    return Text(outcome, style=style)


def _made_by(c: Document) -> str:
    if c["strategy"] == "prune":
        return "prune"
    who = "/".join(x for x in (c.get("provider"), c.get("model")) if x) or f"{c['strategy']} (no summary)"
    who = f"{who} (imported)" if c.get("imported") else who
    return f"{who}, asked by {c['command']}" if c.get("command") else who


def _tokens(c: Document) -> str:
    shadowed, summary = c.get("shadowed_tokens"), c.get("summary_tokens")
    if shadowed is None:
        return ""
    return f"{shadowed} → {summary}" if summary else str(shadowed)


def _checks_cell(checks: Sequence[Document], warnings: int = 0) -> Text:
    noted = f", {_n(warnings, 'warning')}" if warnings else ""
    failed = [k["name"] for k in checks if not k["passed"]]
    if failed:
        return Text(f"{FAIL} {len(failed)} failed: {', '.join(failed)}{noted}", style="bold red")
    skipped = sum(not k.get("applies", True) for k in checks)
    note = f" ({skipped} n/a)" if skipped else ""
    return Text(f"{PASS} {len(checks)}/{len(checks)}{note}{noted}", style="yellow" if warnings else "green")


def _check_lines(label: str, checks: Sequence[Document], verbose: bool) -> list[Text]:
    lines: list[Text] = []
    for check in checks:
        if check["passed"] and not verbose:
            continue
        mark, style = _mark(check)
        line = Text(f"  {mark} {label} ", style=style)
        line.append(check["name"], style=f"bold {style}")
        line.append(f": {check['evidence']}", style="" if not check["passed"] else "dim")
        lines.append(line)
    return lines


def _mark(check: Document) -> tuple[str, str]:
    if not check["passed"]:
        return FAIL, "red"
    return (PASS, "green") if check.get("applies", True) else (NOT_APPLICABLE, "yellow")


def verdict(document: Document) -> Text:
    t = document.get("totals") or totals(document["sessions"])
    counts = ", ".join(_n(t[key], key[:-1]) for key in ("sessions", "compactions", "checks"))
    if t.get("warnings"):
        counts += f"; {_n(t['warnings'], 'warning')}"
    if document["passed"]:
        return Text(f"{PASS} audit passed: {counts}", style="bold green")
    return Text(
        f"{FAIL} audit failed: {_n(t['checks_failed'], 'check')} failed in {t['sessions_failed']} of "
        f"{_n(t['sessions'], 'session')} ({counts})",
        style="bold red",
    )


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
