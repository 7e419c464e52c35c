"""Re-check every compaction of a session from the log alone.

Per bracket (``compact/start`` .. ``compact/end``), each check is pass/fail with evidence: the
bracket shape and outcome; the replace range valid on the surface of that moment; provenance covering
start, summary and every shadowed seq; the shadowed token count re-priced with the recorded meter; the
summary smaller than what it shadowed; both cuts tool-pairing balanced; the first user message still on
the surface; the eight sections; the verbatim-identifier retention ratio; the content hashes of the
shadowed events still matching the log. Pruning records (``compact/prune``) get their own checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from audit.replay import Moment, Replay, replay
from compaction.checkpoint import event_hash
from compaction.events import CompactEnd, CompactPrune, CompactStart, CompactSummary
from compaction.fidelity import section_bodies
from compaction.identifiers import extract, retained
from compaction.instruction import SECTIONS
from compaction.meters import meter_named
from sessions.blocks import Message, text_of
from sessions.events import Replace, SessionEvent, ToolResult, UserMessage
from sessions.session import project

DEFAULT_MIN_RATIO = 0.9


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    evidence: str

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "evidence": self.evidence}


@dataclass
class Bracket:
    compaction_id: str
    start: CompactStart
    summary: CompactSummary | None = None
    replacement: UserMessage | None = None
    end: CompactEnd | None = None

    @property
    def outcome(self) -> str:
        if self.end is None:
            return "orphaned"
        return "failed" if self.end.error else "committed"


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

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def as_json(self) -> dict[str, Any]:
        return {
            "compaction_id": self.compaction_id,
            "outcome": self.outcome,
            "strategy": self.strategy,
            "start_seq": self.start_seq,
            "provider": self.provider,
            "model": self.model,
            "shadowed_seqs": list(self.shadowed_seqs),
            "error": self.error,
            "passed": self.passed,
            "checks": [c.as_json() for c in self.checks],
        }


def find_brackets(events: Sequence[SessionEvent]) -> list[Bracket]:
    brackets: dict[str, Bracket] = {}
    for event in events:
        if isinstance(event, CompactStart):
            brackets[event.compaction_id] = Bracket(event.compaction_id, event)
            continue
        cid = _compaction_id(event)
        bracket = brackets.get(cid) if cid else None
        if bracket is None:
            continue
        if isinstance(event, CompactSummary):
            bracket.summary = event
        elif isinstance(event, UserMessage):
            bracket.replacement = event
        elif isinstance(event, CompactEnd):
            bracket.end = event
    return list(brackets.values())


def _compaction_id(event: SessionEvent) -> str | None:
    if isinstance(event, (CompactSummary, CompactEnd)):
        return event.compaction_id
    if isinstance(event, UserMessage) and isinstance(event.surface_op, Replace):
        return event.message.source.compaction_id
    return None


def audit_events(
    events: Sequence[SessionEvent], *, min_ratio: float = DEFAULT_MIN_RATIO
) -> tuple[list[CompactionAudit], list[Check]]:
    """Audit every compaction and pruning in a stored log; also return log-level checks."""
    folded = replay(events)
    audits = [_audit_bracket(b, folded, min_ratio) for b in find_brackets(events)]
    audits += [_audit_prune(e, folded) for e in events if isinstance(e, CompactPrune)]
    return audits, _log_checks(folded)


def _log_checks(folded: Replay) -> list[Check]:
    if not folded.violations:
        return [Check("log-rules", True, f"all {len(folded.events)} events pass the surface rules")]
    first = min(folded.violations)
    return [
        Check(
            "log-rules",
            False,
            f"{len(folded.violations)} events break surface rules; first at seq {first}: "
            f"{folded.violations[first]}",
        )
    ]


# ---------------------------------------------------------------- summary brackets


def _audit_bracket(bracket: Bracket, folded: Replay, min_ratio: float) -> CompactionAudit:
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
    )
    audit.checks.append(_check_bracket(bracket))
    if bracket.outcome != "committed" or summary is None or bracket.replacement is None:
        audit.checks.append(_check_untouched(bracket, folded))
        return audit
    replacement = bracket.replacement
    moment = folded.moments.get(replacement.seq)
    audit.checks += [
        _check_range(replacement, summary, moment, folded),
        _check_provenance(bracket.start, summary, replacement),
        _check_tokens(summary, folded),
        _check_shrink(summary, replacement),
        _check_cuts(replacement, moment),
        _check_first_user(replacement, folded),
        _check_sections(bracket.start.strategy, summary),
        _check_retention(bracket.start.strategy, summary, folded, min_ratio),
        _check_hashes(summary, folded),
    ]
    return audit


def _check_bracket(bracket: Bracket) -> Check:
    start = bracket.start.seq
    if bracket.end is None:
        return Check("bracket", False, f"compact/start seq {start} has no compact/end (orphaned)")
    end = bracket.end.seq
    if bracket.end.error:
        if bracket.replacement is not None:
            return Check(
                "bracket",
                False,
                f"compact/end seq {end} records an error but replacement seq {bracket.replacement.seq} "
                "landed",
            )
        return Check(
            "bracket", True, f"failed bracket {start}..{end} closed with error: {bracket.end.error}"
        )
    summary, replacement = bracket.summary, bracket.replacement
    if summary is None or replacement is None:
        return Check(
            "bracket", False, f"committed bracket {start}..{end} lacks its summary or replacement"
        )
    order = (start, summary.seq, replacement.seq, end)
    ok = (
        list(order) == sorted(order) and len(set(order)) == 4 and replacement.seq == summary.seq + 1
    )
    return Check(
        "bracket",
        ok,
        f"start {start}, summary {summary.seq}, replacement {replacement.seq}, end {end}"
        + ("" if ok else " (out of order or not adjacent)"),
    )


def _check_untouched(bracket: Bracket, folded: Replay) -> Check:
    citing = [
        e.seq
        for e in folded.events
        if isinstance(e.surface_op, Replace)
        and e.source_event_seqs
        and bracket.start.seq in e.source_event_seqs
    ]
    if citing:
        return Check(
            "surface-untouched",
            False,
            f"replacements {citing} cite compact/start seq {bracket.start.seq}",
        )
    return Check(
        "surface-untouched", True, f"no replacement cites compact/start seq {bracket.start.seq}"
    )


def _check_range(
    replacement: UserMessage, summary: CompactSummary, moment: Moment | None, folded: Replay
) -> Check:
    seq = replacement.seq
    if seq in folded.violations:
        return Check("replace-range", False, f"seq {seq}: {folded.violations[seq]}")
    op = replacement.surface_op
    if moment is None or not isinstance(op, Replace):
        return Check("replace-range", False, f"seq {seq} is not a replacement")
    nodes = moment.nodes
    if op.start not in nodes or op.end not in nodes:
        return Check(
            "replace-range", False, f"seq {seq}: range {op.start}..{op.end} not on the surface"
        )
    i, j = nodes.index(op.start), nodes.index(op.end)
    shadowed = nodes[i : j + 1]
    if shadowed != summary.shadowed_seqs:
        return Check(
            "replace-range",
            False,
            f"seq {seq}: the range shadows {list(shadowed)} but compact/summary seq {summary.seq} "
            f"records {list(summary.shadowed_seqs)}",
        )
    return Check(
        "replace-range", True, f"seq {seq} replaces positions {i}..{j} ({len(shadowed)} nodes)"
    )


def _check_provenance(
    start: CompactStart, summary: CompactSummary, replacement: UserMessage
) -> Check:
    cited = set(replacement.source_event_seqs or ())
    needed = [start.seq, summary.seq, *summary.shadowed_seqs]
    missing = [s for s in needed if s not in cited]
    if missing:
        return Check(
            "provenance",
            False,
            f"replacement seq {replacement.seq} source_event_seqs miss {missing}",
        )
    return Check(
        "provenance",
        True,
        f"replacement seq {replacement.seq} cites start, summary and "
        f"{len(summary.shadowed_seqs)} shadowed seqs",
    )


def _messages(folded: Replay, seqs: Sequence[int]) -> list[Message]:
    return [m for m in (project(folded.event(s)) for s in seqs) if m is not None]


def _check_tokens(summary: CompactSummary, folded: Replay) -> Check:
    meter = meter_named(summary.meter)
    priced = sum(meter.event(folded.event(s)) for s in summary.shadowed_seqs)
    ok = priced == summary.shadowed_token_count
    return Check(
        "shadowed-tokens",
        ok,
        f"re-priced with {meter.name}: {priced}; recorded {summary.shadowed_token_count}",
    )


def _check_shrink(summary: CompactSummary, replacement: UserMessage) -> Check:
    meter = meter_named(summary.meter)
    framed = meter.message(replacement.message)
    ok = framed < summary.shadowed_token_count
    ratio = summary.shadowed_token_count / framed if framed else float("inf")
    return Check(
        "summary-smaller",
        ok,
        f"replacement {framed} tokens vs shadowed {summary.shadowed_token_count} ({ratio:.1f}x)",
    )


def _check_cuts(replacement: UserMessage, moment: Moment | None) -> Check:
    op = replacement.surface_op
    if (
        moment is None
        or not isinstance(op, Replace)
        or op.start not in moment.nodes
        or op.end not in moment.nodes
    ):
        return Check("balanced-cuts", False, "no surface to check the cuts on")
    if moment.balance is None:
        return Check(
            "balanced-cuts",
            False,
            f"surface before seq {replacement.seq} is corrupt: {moment.corrupt}",
        )
    i, j = moment.nodes.index(op.start), moment.nodes.index(op.end)
    before, after = moment.balance[i], moment.balance[j + 1]
    ok = before == 0 and after == 0
    return Check(
        "balanced-cuts",
        ok,
        f"open tool calls before seq {op.start}: {before}; after seq {op.end}: {after}",
    )


def _first_user_seq(folded: Replay) -> int | None:
    for event in folded.events:
        if isinstance(event, UserMessage) and event.surface_op == "append":
            return event.seq
    return None


def _check_first_user(replacement: UserMessage, folded: Replay) -> Check:
    first = _first_user_seq(folded)
    if first is None:
        return Check("first-user-message", True, "the session has no user message")
    after = _surface_after(folded, replacement.seq)
    ok = first in after
    return Check(
        "first-user-message",
        ok,
        f"first user message seq {first} {'is still' if ok else 'is no longer'} on the surface "
        f"after seq {replacement.seq}",
    )


def _surface_after(folded: Replay, seq: int) -> list[int]:
    moment = folded.moments.get(seq)
    op = folded.event(seq).surface_op
    if (
        moment is None
        or not isinstance(op, Replace)
        or op.start not in moment.nodes
        or op.end not in moment.nodes
    ):
        return list(moment.nodes) if moment else []
    nodes = list(moment.nodes)
    i, j = nodes.index(op.start), nodes.index(op.end)
    nodes[i : j + 1] = [seq]
    return nodes


def _summary_text(summary: CompactSummary) -> str:
    return text_of(summary.summary)


def _check_sections(strategy: str, summary: CompactSummary) -> Check:
    if strategy != "summary":
        return Check("sections", True, f"not applicable to the {strategy} strategy")
    bodies = section_bodies(_summary_text(summary))
    missing = [s for s in SECTIONS if not bodies.get(s)]
    if missing:
        return Check("sections", False, f"missing or empty: {', '.join(missing)}")
    return Check("sections", True, "all eight sections present and non-empty")


def _check_retention(
    strategy: str, summary: CompactSummary, folded: Replay, min_ratio: float
) -> Check:
    wanted = extract(_messages(folded, summary.shadowed_seqs)).all()
    kept, missing = retained(wanted, _summary_text(summary))
    ratio = 1.0 if not wanted else len(kept) / len(wanted)
    if strategy == "checkpoint":
        return Check(
            "identifier-retention",
            True,
            f"{len(kept)}/{len(wanted)} ({ratio:.0%}); the checkpoint strategy keeps decisions, not evidence",
        )
    sample = ", ".join(missing[:6])
    return Check(
        "identifier-retention",
        ratio >= min_ratio,
        f"{len(kept)}/{len(wanted)} verbatim identifiers kept ({ratio:.0%}; required {min_ratio:.0%})"
        + (f"; missing e.g. {sample}" if missing else ""),
    )


def _check_hashes(summary: CompactSummary, folded: Replay) -> Check:
    if not summary.shadowed_hashes:
        return Check("content-hashes", False, "compact/summary records no content hashes")
    changed = [
        s
        for s in summary.shadowed_seqs
        if summary.shadowed_hashes.get(str(s)) != event_hash(folded.event(s))
    ]
    if changed:
        return Check(
            "content-hashes", False, f"shadowed events changed since the compaction: seqs {changed}"
        )
    return Check(
        "content-hashes",
        True,
        f"{len(summary.shadowed_seqs)} shadowed events match their recorded hashes",
    )


# ---------------------------------------------------------------- pruning records


def _audit_prune(record: CompactPrune, folded: Replay) -> CompactionAudit:
    audit = CompactionAudit(
        compaction_id=f"prune-{record.seq}",
        outcome="committed",
        strategy="prune",
        start_seq=record.seq,
        provider=None,
        model=None,
        shadowed_seqs=record.shadowed_seqs,
    )
    nxt = folded.events[record.seq + 1] if record.seq + 1 < len(folded.events) else None
    if not isinstance(nxt, ToolResult) or not isinstance(nxt.surface_op, Replace):
        audit.outcome = "orphaned"
        audit.checks.append(
            Check(
                "bracket",
                False,
                f"compact/prune seq {record.seq} is not followed by a tool/result replacement",
            )
        )
        return audit
    audit.checks.append(
        Check("bracket", True, f"prune {record.seq} followed by replacement {nxt.seq}")
    )
    violation = folded.violations.get(nxt.seq)
    audit.checks.append(
        Check(
            "replace-range",
            violation is None,
            violation or f"seq {nxt.seq} rewrites seq {record.shadowed_seqs[0]} (content only)",
        )
    )
    original = folded.event(record.shadowed_seqs[0])
    meter = meter_named(record.meter)
    priced = meter.event(original)
    audit.checks.append(
        Check(
            "shadowed-tokens",
            priced == record.shadowed_token_count,
            f"re-priced {priced}; recorded {record.shadowed_token_count}",
        )
    )
    audit.checks.append(
        Check(
            "pair-kept",
            isinstance(original, ToolResult)
            and original.message.source.call_id == nxt.message.source.call_id,
            f"call id {nxt.message.source.call_id} kept",
        )
    )
    return audit
