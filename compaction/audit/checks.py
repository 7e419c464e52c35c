"""Re-check every compaction of a session from the log alone.

Per bracket (``compact/start`` .. ``compact/end``), each check is pass/fail with evidence: the
bracket shape and outcome; the replace range valid on the surface of that moment; provenance covering
start, summary and every shadowed seq; the shadowed token count re-priced with the recorded meter; the
summary smaller than what it shadowed; both cuts tool-pairing balanced; the first user message still on
the surface; the eight sections; the verbatim-identifier retention ratio; the content hashes of the
shadowed events still matching the log; and, for a summary the compaction completed before the gate
(``compact/summary`` carries a ``completion`` record), that the recorded appendix is the summary's
tail and adds only what the shadowed span holds. Pruning records (``compact/prune``) get their own
checks.

Invariants apply to every bracket. The three policies of this library (first user message kept, eight
sections, identifier retention) apply to its own summaries only: on a compaction imported from another
harness (its ``compact/start`` carries an import ``origin``) and on a checkpoint rebuild they are
measured and reported with ``applies=False`` and ``passed=True``.

A check that cannot run on a damaged log fails with the reason instead of stopping the audit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Any

from compaction.audit.replay import Moment, Replay, replay
from compaction.engine.brackets import COMMITTED, FAILED, ORPHANED, Bracket, find_brackets, member_of
from compaction.engine.meters import Meter, meter_named
from compaction.handover.completion import appended, model_text, span_identifiers
from compaction.handover.fidelity import section_bodies
from compaction.handover.identifiers import Identifiers, extract, retained
from compaction.sessions.blocks import Message, text_of
from compaction.sessions.call_ids import repeated_call_ids
from compaction.sessions.events import CommandRun, Replace, SessionEvent, ToolResult, UserMessage
from compaction.sessions.hashing import event_hash
from compaction.sessions.session import first_user_seq, project
from compaction.vocabulary.checkpoint import frame
from compaction.vocabulary.events import CompactPrune, CompactStart, CompactSummary, Completion
from compaction.vocabulary.instruction import SECTIONS
from compaction.vocabulary.invariant import bracket_violations

DEFAULT_MIN_RATIO = 0.9

CHECK_NAMES: tuple[str, ...] = (
    "bracket",
    "surface-untouched",
    "replace-range",
    "provenance",
    "shadowed-tokens",
    "summary-smaller",
    "balanced-cuts",
    "first-user-message",
    "sections",
    "identifier-retention",
    "content-hashes",
    "completion",
    "pair-kept",
)
"""Every per-compaction check name, in report order."""

LOG_CHECK_NAMES: tuple[str, ...] = ("stored-rows", "log-rules", "bracket-members")
"""Every log-level check name (``stored-rows`` is added by the store loader)."""


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    evidence: str
    applies: bool = True  # False: a policy of this library measured on someone else's compaction

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "passed": self.passed,
            "evidence": self.evidence,
            "applies": self.applies,
        }


@dataclass
class CompactionAudit:
    compaction_id: str
    outcome: str
    strategy: str
    start_seq: int
    provider: str | None
    model: str | None
    shadowed_seqs: tuple[int, ...]
    checks: list[Check] = field(default_factory=list)
    error: str | None = None
    imported: bool = False
    summary_seq: int | None = None
    replacement_seq: int | None = None
    end_seq: int | None = None
    shadowed_tokens: int | None = None  # as recorded
    summary_tokens: int | None = None  # as recorded
    completion: dict[str, Any] | None = None  # what the summarizer wrote and what was added
    command: str | None = None  # who asked: "/compact <args> (command <id>)"; None: automatic
    warnings: list[str] = field(default_factory=list)  # a passing compaction a reader should doubt

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]

    def as_json(self) -> dict[str, Any]:
        return {
            "compaction_id": self.compaction_id,
            "outcome": self.outcome,
            "strategy": self.strategy,
            "imported": self.imported,
            "start_seq": self.start_seq,
            "summary_seq": self.summary_seq,
            "replacement_seq": self.replacement_seq,
            "end_seq": self.end_seq,
            "provider": self.provider,
            "model": self.model,
            "shadowed_seqs": list(self.shadowed_seqs),
            "shadowed_tokens": self.shadowed_tokens,
            "summary_tokens": self.summary_tokens,
            "error": self.error,
            "completion": self.completion,
            "command": self.command,
            "passed": self.passed,
            "warnings": list(self.warnings),
            "checks": [c.as_json() for c in self.checks],
        }


@dataclass(frozen=True)
class Policy:
    """What the auditor requires of this library's own summaries."""

    min_ratio: float = DEFAULT_MIN_RATIO
    keep_first_user: bool = True
    first_user_seq: int | None = None  # of the log under audit (found once)


def audit_events(
    events: Sequence[SessionEvent],
    *,
    min_ratio: float = DEFAULT_MIN_RATIO,
    keep_first_user: bool = True,
) -> tuple[list[CompactionAudit], list[Check]]:
    """Audit every compaction and pruning in a stored log; also return log-level checks.

    ``events[i]`` must be the event at seq ``i`` (see :func:`compaction.audit.report.load_log` for a tolerant
    loader that fills unreadable or missing rows with placeholders)."""
    folded = replay(events)
    policy = Policy(min_ratio, keep_first_user, first_user_seq(events))
    commands = {e.command_id: e for e in events if isinstance(e, CommandRun)}
    audits = [_audit_bracket(b, folded, policy, commands) for b in find_brackets(events)]
    audits += [_audit_prune(e, folded) for e in events if isinstance(e, CompactPrune)]
    audits.sort(key=lambda a: a.start_seq)
    return audits, [
        _check_log_rules(folded),
        _check_members(events),
        _guarded("compact-brackets", lambda: _check_bracket_invariant(events)),
        _guarded("unique-call-ids", lambda: _check_unique_call_ids(events)),
    ]


def _check_unique_call_ids(events: Sequence[SessionEvent]) -> Check:
    """At every position of the log, every tool call id on the surface is unique (a provider
    refuses a request that repeats one), markers or not."""
    found = repeated_call_ids(events)
    if not found:
        return Check("unique-call-ids", True, "every tool call id on the surface is unique at every position")
    shown = "; ".join(r.message for r in found[:3])
    more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
    return Check(
        "unique-call-ids", False, f"{len(found)} tool calls repeat an id on the surface: {shown}{more}"
    )


def _check_bracket_invariant(events: Sequence[SessionEvent]) -> Check:
    """The bracket invariant over the whole log, markers or not: a log written before it (or
    imported) loads, and this reports what the invariant would have refused. Records imported
    from another harness (they carry an ``origin``) follow that harness's rules and are not
    counted."""
    imported = {e.seq for e in events if e.origin is not None}
    found = [v for v in bracket_violations(None, events) if v.seq not in imported]
    if not found:
        return Check("compact-brackets", True, "every compact/* record nests as the invariant requires")
    shown = "; ".join(v.message for v in found[:3])
    more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
    return Check("compact-brackets", False, f"{len(found)} records break the invariant: {shown}{more}")


def _command(start: CompactStart, commands: dict[str, CommandRun]) -> str | None:
    if start.source_command_id is None:
        return None
    run = commands.get(start.source_command_id)
    asked = f"/{run.name}" + (f" {run.args}" if run.args else "") if run else "a command"
    return f"{asked} (command {start.source_command_id})"


def _check_log_rules(folded: Replay) -> Check:
    if not folded.violations:
        return Check("log-rules", True, f"all {len(folded.events)} events pass the surface rules")
    first = min(folded.violations)
    return Check(
        "log-rules",
        False,
        f"{len(folded.violations)} events break surface rules (seqs "
        f"{_seqs(sorted(folded.violations))}); first at seq {first}: {folded.violations[first]}",
    )


def _check_members(events: Sequence[SessionEvent]) -> Check:
    """Every compact/summary, compact/end and checkpoint replacement belongs to a compact/start."""
    started = {e.compaction_id for e in events if isinstance(e, CompactStart)}
    strays = [e.seq for e in events if (cid := member_of(e)) is not None and cid not in started]
    if strays:
        return Check(
            "bracket-members",
            False,
            f"events at seqs {_seqs(strays)} belong to compactions with no compact/start",
        )
    return Check("bracket-members", True, f"{len(started)} brackets; no stray bracket members")


def _seqs(seqs: Sequence[int], limit: int = 12) -> str:
    shown = ", ".join(map(str, seqs[:limit]))
    return shown + (f", ... ({len(seqs)} in all)" if len(seqs) > limit else "")


def _event(folded: Replay, seq: int) -> SessionEvent | None:
    return folded.events[seq] if 0 <= seq < len(folded.events) else None


def _guarded(name: str, run: Callable[[], Check]) -> Check:
    """Run one check; on a log too damaged for it, fail with the reason."""
    try:
        return run()
    except Exception as e:  # a damaged log may break any assumption: report, never stop
        return Check(name, False, f"the check could not run: {type(e).__name__}: {e}")


# ---------------------------------------------------------------- summary brackets


def _audit_bracket(
    bracket: Bracket, folded: Replay, policy: Policy, commands: dict[str, CommandRun]
) -> CompactionAudit:
    summary = bracket.summary
    audit = CompactionAudit(
        compaction_id=bracket.compaction_id,
        outcome=bracket.outcome,
        strategy=bracket.start.strategy,
        start_seq=bracket.start.seq,
        provider=summary.provider if summary else None,
        model=summary.model if summary else None,
        shadowed_seqs=summary.shadowed_seqs if summary else (),
        error=bracket.end.error if bracket.end else None,
        imported=bracket.imported,
        summary_seq=summary.seq if summary else None,
        replacement_seq=bracket.replacement.seq if bracket.replacement else None,
        end_seq=bracket.end.seq if bracket.end else None,
        shadowed_tokens=summary.shadowed_token_count if summary else None,
        summary_tokens=summary.summary_token_count if summary else None,
        completion=completion_json(summary) if summary else None,
        command=_command(bracket.start, commands),
    )
    audit.checks.append(_guarded("bracket", lambda: _check_bracket(bracket)))
    if bracket.outcome != COMMITTED or summary is None or bracket.replacement is None:
        audit.checks.append(_guarded("surface-untouched", lambda: _check_untouched(bracket, folded)))
        return audit
    audit.warnings = completion_warnings(summary)
    committed = Committed(bracket, summary, bracket.replacement, folded, policy)
    audit.checks += [_guarded(name, partial(check, committed)) for name, check in _COMMITTED_CHECKS]
    if summary.completion is not None:
        audit.checks.append(_guarded("completion", partial(_check_completion, committed)))
    return audit


def completion_json(summary: CompactSummary) -> dict[str, Any] | None:
    """What the summarizer wrote and what the compaction added, for the report."""
    record = summary.completion
    if record is None:
        return None
    text = _summary_text(summary)
    model = record.model_fidelity
    return {
        "mode": record.mode,
        "model_chars": len(model_text(text, record)),
        "appendix_chars": len(record.appendix),
        "repaired": record.draft is not None,
        "repair_error": record.repair_error,
        "model_identifiers_kept": f"{model.identifiers_kept}/{model.identifiers_total}" if model else None,
        "added_identifiers": len(record.added_identifiers),
        "added_user_asks": len(record.added_user_asks),
        "added_open_tasks": len(record.added_open_tasks),
        "added_errors": len(record.added_errors),
        "added_sections": list(record.added_sections),
    }


HALF = 0.5


def completion_warnings(summary: CompactSummary) -> list[str]:
    """Why a committed summary the library completed deserves a reader's doubt, though it passed:
    the model's own text kept under half the identifiers, echoed the instruction (or wrote nothing
    of its own), or is shorter than what the library appended."""
    record = summary.completion
    if record is None:
        return []
    warnings: list[str] = []
    kept = record.model_fidelity
    if kept is not None and kept.identifiers_total and kept.identifiers_kept < HALF * kept.identifiers_total:
        warnings.append(
            f"the model's own text kept {kept.identifiers_kept}/{kept.identifiers_total} identifiers "
            "(under half); the rest are the library's appendix"
        )
    if record.echoed_lines or record.echoed_sections:
        sections = f" (sections {', '.join(record.echoed_sections)})" if record.echoed_sections else ""
        warnings.append(
            f"the model echoed the instruction: {record.echoed_lines} placeholder or instruction "
            f"lines taken out{sections}, filled from the span's facts"
        )
    if record.model_empty:
        warnings.append("the model's text held nothing of its own: the checkpoint is the library's appendix")
    model = model_text(_summary_text(summary), record)
    if record.appendix and len(model) < len(record.appendix):
        warnings.append(
            f"the model's text ({len(model)} characters) is shorter than the appendix the library "
            f"added ({len(record.appendix)} characters)"
        )
    return warnings


def _added(record: Completion) -> str:
    counts = (
        (len(record.added_identifiers), "identifier"),
        (len(record.added_user_asks), "user ask"),
        (len(record.added_open_tasks), "open task"),
        (len(record.added_errors), "error"),
        (len(record.added_sections), "section"),
    )
    listed = ", ".join(counted(n, what) for n, what in counts if n)
    return listed or "nothing"


def counted(count: int, noun: str) -> str:
    """``1 identifier``, ``2 identifiers``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _check_bracket(bracket: Bracket) -> Check:
    start = bracket.start.seq
    if bracket.end is None:
        return Check(
            "bracket",
            False,
            f"compact/start seq {start} has no compact/end (orphaned: a crash, a deleted row, or "
            "a compaction still running; `compaction recover` closes stale ones)",
        )
    end = bracket.end.seq
    if bracket.outcome == FAILED:
        if bracket.replacement is not None:
            return Check(
                "bracket",
                False,
                f"compact/end seq {end} records an error but replacement seq "
                f"{bracket.replacement.seq} landed",
            )
        return Check("bracket", True, f"failed bracket {start}..{end} closed with error: {bracket.end.error}")
    summary, replacement = bracket.summary, bracket.replacement
    if summary is None or replacement is None:
        lacking = " and ".join(
            n for n, e in (("compact/summary", summary), ("replacement", replacement)) if e is None
        )
        return Check("bracket", False, f"committed bracket {start}..{end} lacks its {lacking}")
    order = (start, summary.seq, replacement.seq, end)
    ok = list(order) == sorted(order) and len(set(order)) == 4 and replacement.seq == summary.seq + 1
    return Check(
        "bracket",
        ok,
        f"start {start}, summary {summary.seq}, replacement {replacement.seq}, end {end}"
        + ("" if ok else " (out of order or not adjacent)"),
    )


def _check_untouched(bracket: Bracket, folded: Replay) -> Check:
    start = bracket.start.seq
    citing = [
        e.seq
        for e in folded.events
        if isinstance(e.surface_op, Replace) and e.source_event_seqs and start in e.source_event_seqs
    ]
    if bracket.replacement is not None:
        citing = sorted({*citing, bracket.replacement.seq})
    if citing:
        return Check(
            "surface-untouched",
            False,
            f"the {bracket.outcome} bracket at seq {start} changed the surface: replacements {citing}",
        )
    return Check(
        "surface-untouched",
        True,
        f"the {bracket.outcome} bracket at seq {start} left the surface untouched",
    )


@dataclass(frozen=True)
class Committed:
    """A committed bracket under audit, with the replay it is checked against."""

    bracket: Bracket
    summary: CompactSummary
    replacement: UserMessage
    folded: Replay
    policy: Policy

    @property
    def moment(self) -> Moment | None:
        return self.folded.moments.get(self.replacement.seq)

    @cached_property
    def shadowed(self) -> list[Message]:
        """The shadowed messages, as the replay holds them."""
        return _messages(self.folded, self.summary.shadowed_seqs)

    @cached_property
    def identifiers(self) -> Identifiers:
        """The shadowed span's identifiers as the gate counts them (found once for the checks)."""
        return extract(self.shadowed)

    @property
    def scope(self) -> str | None:
        """Why this library's policies do not apply to the bracket (None: they do)."""
        if self.bracket.imported:
            return f"imported {self.summary.provider} compaction"
        if self.bracket.start.strategy == "checkpoint":
            return "checkpoint rebuild (keeps decisions, not evidence)"
        return None


CommittedCheck = Callable[[Committed], Check]


def _range(op: Replace, moment: Moment) -> tuple[int, int] | None:
    """Positions of the replaced range on the surface of that moment (None: not on it)."""
    if op.start not in moment.nodes or op.end not in moment.nodes:
        return None
    return moment.nodes.index(op.start), moment.nodes.index(op.end)


def _check_range(c: Committed) -> Check:
    seq, op, moment, summary = c.replacement.seq, c.replacement.surface_op, c.moment, c.summary
    if seq in c.folded.violations:
        return Check("replace-range", False, f"seq {seq}: {c.folded.violations[seq]}")
    if moment is None or not isinstance(op, Replace):
        return Check("replace-range", False, f"seq {seq} is not a replacement")
    positions = _range(op, moment)
    if positions is None:
        return Check("replace-range", False, f"seq {seq}: range {op.start}..{op.end} not on the surface")
    i, j = positions
    shadowed = moment.nodes[i : j + 1]
    if shadowed != summary.shadowed_seqs:
        return Check(
            "replace-range",
            False,
            f"seq {seq}: the range shadows {_seqs(shadowed)} but compact/summary seq {summary.seq} "
            f"records {_seqs(summary.shadowed_seqs)}",
        )
    recorded = summary.shadowed_range
    if (recorded.start, recorded.end) != (op.start, op.end):
        return Check(
            "replace-range",
            False,
            f"seq {seq} replaces {op.start}..{op.end} but compact/summary seq {summary.seq} records "
            f"the range {recorded.start}..{recorded.end}",
        )
    return Check(
        "replace-range",
        True,
        f"seq {seq} replaces seqs {op.start}..{op.end} at positions {i}..{j} ({len(shadowed)} "
        f"of {len(moment.nodes)} nodes)",
    )


def _check_provenance(c: Committed) -> Check:
    seq, summary = c.replacement.seq, c.summary
    cited = set(c.replacement.source_event_seqs or ())
    needed = [c.bracket.start.seq, summary.seq, *summary.shadowed_seqs]
    missing = [s for s in needed if s not in cited]
    extra = sorted(cited - set(needed))
    if missing or extra:
        parts = [f"miss seqs {_seqs(missing)}"] if missing else []
        parts += [f"cite seqs outside the bracket {_seqs(extra)}"] if extra else []
        return Check("provenance", False, f"replacement seq {seq} source_event_seqs " + " and ".join(parts))
    # What the model sees must be the recorded summary: the other checks read compact/summary.
    imported = c.bracket.imported
    expected = summary.summary if imported else frame(summary.summary)
    if text_of(c.replacement.message.content) != text_of(expected):
        return Check(
            "provenance",
            False,
            f"replacement seq {seq} does not carry the summary recorded on compact/summary seq "
            f"{summary.seq} (its text differs from the {'' if imported else 'framed '}summary)",
        )
    return Check(
        "provenance",
        True,
        f"replacement seq {seq} cites start {c.bracket.start.seq}, summary {summary.seq} "
        f"and {len(summary.shadowed_seqs)} shadowed seqs",
    )


def _priced(c: Committed) -> tuple[Meter, int]:
    """The shadowed span re-priced with the meter the compaction recorded."""
    meter = meter_named(c.summary.meter)
    total = 0
    for seq in c.summary.shadowed_seqs:
        event = _event(c.folded, seq)
        if event is None:
            raise LookupError(f"compact/summary seq {c.summary.seq} shadows seq {seq}, not in the log")
        total += meter.event(event)
    return meter, total


def _check_tokens(c: Committed) -> Check:
    meter, priced = _priced(c)
    recorded = c.summary.shadowed_token_count
    return Check(
        "shadowed-tokens",
        priced == recorded,
        f"re-priced with {meter.name}: {priced}; recorded {recorded}",
    )


def _check_shrink(c: Committed) -> Check:
    meter, shadowed = _priced(c)
    framed = meter.message(c.replacement.message)
    ok = framed < shadowed
    ratio = f"{shadowed / framed:.1f}x smaller" if framed else "empty"
    return Check(
        "summary-smaller",
        ok,
        f"replacement {framed} tokens vs shadowed {shadowed} ({ratio if ok else 'not smaller'})",
    )


def _check_cuts(c: Committed) -> Check:
    op, moment = c.replacement.surface_op, c.moment
    positions = _range(op, moment) if moment is not None and isinstance(op, Replace) else None
    if moment is None or positions is None or not isinstance(op, Replace):
        return Check("balanced-cuts", False, "no surface to check the cuts on (see replace-range)")
    if moment.balance is None:
        return Check(
            "balanced-cuts", False, f"surface before seq {c.replacement.seq} is corrupt: {moment.corrupt}"
        )
    i, j = positions
    before, after = moment.balance[i], moment.balance[j + 1]
    return Check(
        "balanced-cuts",
        before == 0 and after == 0,
        f"open tool calls before seq {op.start}: {before}; after seq {op.end}: {after}",
    )


def _policy(check: Check, scope: str | None) -> Check:
    """A policy check outside its scope passes, keeping what it measured as evidence."""
    if scope is None or check.passed:
        return check
    return Check(check.name, True, f"not required of an {scope}; measured: {check.evidence}", False)


def _check_first_user(c: Committed) -> Check:
    first = c.policy.first_user_seq
    seq = c.replacement.seq
    if first is None:
        return Check("first-user-message", True, "the session has no user message")
    if c.moment is not None and first not in c.moment.nodes:
        return Check(
            "first-user-message",
            True,
            f"first user message seq {first} was already off the surface before seq {seq} "
            "(an earlier replacement shadowed it)",
        )
    shadowed = first in c.summary.shadowed_seqs
    where = "is shadowed by" if shadowed else "is still on the surface after"
    where += f" replacement seq {seq}"
    check = Check("first-user-message", not shadowed, f"first user message seq {first} {where}")
    scope = c.scope
    if scope is None and not c.policy.keep_first_user:
        scope = "audit run that allows it (keep_first_user=False)"
    return _policy(check, scope)


def _summary_text(summary: CompactSummary) -> str:
    return text_of(summary.summary)


def _check_sections(c: Committed) -> Check:
    bodies = section_bodies(_summary_text(c.summary))
    missing = [s for s in SECTIONS if not bodies.get(s)]
    check = (
        Check("sections", False, f"missing or empty: {', '.join(missing)}")
        if missing
        else Check("sections", True, "all eight sections present and non-empty")
    )
    return _policy(check, c.scope)


def _messages(folded: Replay, seqs: Sequence[int]) -> list[Message]:
    events = (_event(folded, s) for s in seqs)
    return [m for m in (project(e) for e in events if e is not None) if m is not None]


def _check_retention(c: Committed) -> Check:
    wanted = c.identifiers.all()
    kept, missing = retained(wanted, _summary_text(c.summary))
    ratio = 1.0 if not wanted else len(kept) / len(wanted)
    sample = ", ".join(missing[:6])
    check = Check(
        "identifier-retention",
        ratio >= c.policy.min_ratio,
        f"{len(kept)}/{len(wanted)} verbatim identifiers kept ({ratio:.0%}; required "
        f"{c.policy.min_ratio:.0%})" + (f"; missing e.g. {sample}" if missing else ""),
    )
    return _policy(check, c.scope)


def _check_hashes(c: Committed) -> Check:
    summary = c.summary
    if not summary.shadowed_hashes:
        return Check("content-hashes", False, f"compact/summary seq {summary.seq} records no content hashes")
    changed = []
    for seq in summary.shadowed_seqs:
        event = _event(c.folded, seq)
        if event is None or summary.shadowed_hashes.get(str(seq)) != event_hash(event):
            changed.append(seq)
    if changed:
        return Check(
            "content-hashes",
            False,
            f"shadowed events changed since the compaction: seqs {_seqs(changed)} no longer match "
            f"the hashes recorded on compact/summary seq {summary.seq}",
        )
    return Check(
        "content-hashes",
        True,
        f"{len(summary.shadowed_seqs)} shadowed events match their recorded hashes",
    )


def _check_completion(c: Committed) -> Check:
    """The recorded appendix is the summary's tail, carries everything recorded as added, and adds
    only identifiers the shadowed span holds (the completion never invents)."""
    record = c.summary.completion
    assert record is not None
    text = _summary_text(c.summary)
    block = record.appendix
    model = model_text(text, record)
    if block and appended(model, block) != text:
        return Check(
            "completion",
            False,
            f"compact/summary seq {c.summary.seq}: the summary does not end with the recorded "
            f"appendix ({len(block)} characters)",
        )
    items = [*record.added_identifiers, *record.added_user_asks, *record.added_open_tasks,
             *record.added_errors, *(f"## {s}" for s in record.added_sections)]  # fmt: skip
    # One sorted pass over the appendix, not one scan of it per item (a long span adds tens of
    # thousands of identifiers to an appendix of megabytes).
    absent = [i for i in retained(items, block)[1] if i]
    if absent:
        return Check(
            "completion",
            False,
            f"recorded as added but not in the appendix: {', '.join(absent[:6])}",
        )
    span = set(span_identifiers(c.shadowed, gate=c.identifiers).all())
    invented = [i for i in record.added_identifiers if i not in span]
    if invented:
        return Check(
            "completion",
            False,
            f"the appendix adds identifiers the shadowed span does not hold: {', '.join(invented[:6])}",
        )
    kept = record.model_fidelity
    wrote = f"model wrote {len(model)} characters"
    if kept is not None:
        wrote += f" keeping {kept.identifiers_kept}/{kept.identifiers_total} identifiers"
    repaired = " after one repair request" if record.draft is not None else ""
    return Check(
        "completion",
        True,
        f"{record.mode}: {wrote}{repaired}; the compaction added {len(block)} characters "
        f"({_added(record)}), all from the shadowed span",
    )


_COMMITTED_CHECKS: tuple[tuple[str, CommittedCheck], ...] = (
    ("replace-range", _check_range),
    ("provenance", _check_provenance),
    ("shadowed-tokens", _check_tokens),
    ("summary-smaller", _check_shrink),
    ("balanced-cuts", _check_cuts),
    ("first-user-message", _check_first_user),
    ("sections", _check_sections),
    ("identifier-retention", _check_retention),
    ("content-hashes", _check_hashes),
)


# ---------------------------------------------------------------- pruning records


def _audit_prune(record: CompactPrune, folded: Replay) -> CompactionAudit:
    nxt = _event(folded, record.seq + 1)
    audit = CompactionAudit(
        compaction_id=f"prune-{record.seq}",
        outcome=COMMITTED,
        strategy="prune",
        start_seq=record.seq,
        provider=None,
        model=None,
        shadowed_seqs=record.shadowed_seqs,
        replacement_seq=nxt.seq if nxt is not None else None,
        shadowed_tokens=record.shadowed_token_count,
    )
    if not isinstance(nxt, ToolResult) or not isinstance(nxt.surface_op, Replace):
        audit.outcome = ORPHANED
        audit.checks.append(
            Check(
                "bracket",
                False,
                f"compact/prune seq {record.seq} is not followed by a tool/result replacement",
            )
        )
        return audit
    audit.checks.append(Check("bracket", True, f"prune {record.seq} followed by replacement {nxt.seq}"))
    violation = folded.violations.get(nxt.seq)
    audit.checks.append(
        Check(
            "replace-range",
            violation is None,
            violation or f"seq {nxt.seq} rewrites seq {_seqs(record.shadowed_seqs)} (content only)",
        )
    )
    audit.checks.append(_guarded("shadowed-tokens", lambda: _check_prune_tokens(record, folded)))
    audit.checks.append(_guarded("pair-kept", lambda: _check_pair_kept(record, nxt, folded)))
    return audit


def _pruned_original(record: CompactPrune, folded: Replay) -> SessionEvent:
    if len(record.shadowed_seqs) != 1:
        raise LookupError(
            f"compact/prune seq {record.seq} records {len(record.shadowed_seqs)} shadowed seqs; "
            "expected exactly one"
        )
    original = _event(folded, record.shadowed_seqs[0])
    if original is None:
        raise LookupError(
            f"compact/prune seq {record.seq} shadows seq {record.shadowed_seqs[0]}, not in the log"
        )
    return original


def _check_prune_tokens(record: CompactPrune, folded: Replay) -> Check:
    original = _pruned_original(record, folded)
    priced = meter_named(record.meter).event(original)
    return Check(
        "shadowed-tokens",
        priced == record.shadowed_token_count,
        f"re-priced seq {original.seq}: {priced}; recorded {record.shadowed_token_count}",
    )


def _check_pair_kept(record: CompactPrune, replacement: ToolResult, folded: Replay) -> Check:
    original = _pruned_original(record, folded)
    call_id = replacement.message.source.call_id
    ok = isinstance(original, ToolResult) and original.message.source.call_id == call_id
    return Check(
        "pair-kept",
        ok,
        f"call id {call_id} " + ("kept" if ok else f"differs from the pruned seq {original.seq}'s"),
    )
