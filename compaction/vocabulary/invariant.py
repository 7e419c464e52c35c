"""The bracket invariant: ``compact/*`` records must form well-nested brackets.

One compaction is ``compact/start``, at most one ``compact/summary``, at most one checkpoint
replacement, then ``compact/end``, with no other compaction opened in between. The start's ``turn``
names its owner: ``None`` is a standalone compaction (manual, between turns) and needs no open turn;
a number is owned by that turn, which must be open. A turn boundary never crosses an open bracket.
A ``session/resume`` (a new process lifecycle, the end-seed of a copy or a clear) leaves an
unmatched start behind as a stale orphan: it no longer counts as open, and the one record that may
still name it is recovery's closing ``compact/end`` with an error.

:func:`check_brackets` is the rule a session puts in force with a ``session/invariants`` marker
(:mod:`compaction.sessions.invariants`): it rejects an event before it enters the log, and again
when a stored log is loaded. It keeps no state of its own; the open bracket is read from the
session's indexes (the latest start, summary and end, the latest resume), so it holds after a
snapshot restore or a rollback as it does on a replay. :func:`bracket_violations` runs the same
rule over a whole log regardless of markers, for the audit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NoReturn
from uuid import UUID

from compaction.errors import BracketRuleError
from compaction.sessions.events import Replace, SessionEvent, TurnEnd, TurnStart, UserMessage
from compaction.sessions.session import Session
from compaction.vocabulary.events import COMPACT_PLUGIN, CompactEnd, CompactStart, CompactSummary

RULE = "compact-brackets"
RESUME = "session/resume"


def check_brackets(session: Session, event: SessionEvent) -> None:
    """Reject ``event`` if appending it to ``session`` would break the bracket invariant."""
    if isinstance(event, CompactStart):
        _check_start(session, event)
    elif isinstance(event, CompactSummary):
        _check_summary(session, event)
    elif isinstance(event, CompactEnd):
        _check_end(session, event)
    elif isinstance(event, (TurnStart, TurnEnd)):
        _check_boundary(session, event)
    elif _is_checkpoint_replacement(event):
        assert isinstance(event, UserMessage)
        _check_checkpoint(session, event)


# ---------------------------------------------------------------- reading the open bracket


@dataclass(frozen=True)
class _Open:
    start: CompactStart
    summary_seq: int | None


def _latest_start(session: Session) -> CompactStart | None:
    """The latest ``compact/start`` when no ``compact/end`` follows it (open or stale)."""
    start = session.last_of(CompactStart.TYPE)
    end = session.last_of(CompactEnd.TYPE)
    if start is None or (end is not None and end > start):
        return None
    event = session.event(start)
    return event if isinstance(event, CompactStart) else None


def _open_bracket(session: Session) -> _Open | None:
    """The open bracket: an unmatched start that no later ``session/resume`` made stale."""
    start = _latest_start(session)
    if start is None:
        return None
    resume = session.last_of(RESUME)
    if resume is not None and resume > start.seq:
        return None
    summary = session.last_of(CompactSummary.TYPE)
    return _Open(start, summary if summary is not None and summary > start.seq else None)


def _stale_start(session: Session) -> CompactStart | None:
    start = _latest_start(session)
    resume = session.last_of(RESUME)
    if start is None or resume is None or resume < start.seq:
        return None
    return start


# ---------------------------------------------------------------- the rules per record


def _check_start(session: Session, event: CompactStart) -> None:
    label = "compact/start"
    _require_ids(event, label, event.compaction_id, event.source_command_id)
    bracket = _open_bracket(session)
    if bracket is not None:
        owner = bracket.start.turn
        held = "standalone compaction" if owner is None else f"turn {owner}"
        _fail(
            event,
            f"compact/start while {held} is still compacting",
            expected="no open compaction",
            found=f"compact/start seq {bracket.start.seq} (compaction {bracket.start.compaction_id})",
        )
    _check_owner(session, event, label, event.turn)


def _check_summary(session: Session, event: CompactSummary) -> None:
    label = "compact/summary"
    _require_ids(event, label, event.compaction_id, event.source_command_id)
    bracket = _matching_open(session, event, label, event.compaction_id, event.source_command_id)
    _check_owner(session, event, label, bracket.start.turn)
    if bracket.summary_seq is not None:
        _fail(
            event,
            "compact/summary repeated within one compaction",
            expected="one compact/summary per compaction",
            found=f"compact/summary seq {bracket.summary_seq}",
        )
    seqs = event.shadowed_seqs
    if not seqs:
        _fail(event, "compact/summary shadowed_seqs must be non-empty", "shadowed seqs", "none")
    shadowed = event.shadowed_range
    if (shadowed.start, shadowed.end) != (seqs[0], seqs[-1]):
        _fail(
            event,
            "compact/summary shadowed_range must match the first and last shadowed_seqs",
            expected=f"{seqs[0]}..{seqs[-1]}",
            found=f"{shadowed.start}..{shadowed.end}",
        )
    if event.shadowed_token_count < 0:
        _fail(
            event,
            "compact/summary shadowed_token_count must be a non-negative integer",
            expected=">= 0",
            found=str(event.shadowed_token_count),
        )


def _check_end(session: Session, event: CompactEnd) -> None:
    label = "compact/end"
    _require_ids(event, label, event.compaction_id, event.source_command_id)
    stale = _stale_start(session)
    if (
        stale is not None
        and stale.compaction_id == event.compaction_id
        and event.error is not None
        and _open_bracket(session) is None
    ):
        return  # recovery closing an orphan a later session/resume made stale
    bracket = _matching_open(session, event, label, event.compaction_id, event.source_command_id)
    owner = bracket.start.turn
    if event.turn != owner:
        _fail(
            event,
            f"compact/end owner {_owner(event.turn)} does not match compact/start owner {_owner(owner)}",
            expected=_owner(owner),
            found=_owner(event.turn),
        )
    _check_owner(session, event, label, owner)
    if event.error is None and bracket.summary_seq is None:
        _fail(
            event,
            "successful compact/end requires one compact/summary",
            expected="a compact/summary in the bracket",
            found="none",
        )


def _check_checkpoint(session: Session, event: UserMessage) -> None:
    label = "compaction checkpoint"
    source = event.message.source
    _require_ids(event, label, source.compaction_id or "", source.source_command_id)
    bracket = _open_bracket(session)
    if bracket is None:
        _fail(
            event,
            "compaction checkpoint has no matching compact/start",
            expected=f"an open compact/start of compaction {source.compaction_id}",
            found="no open compaction",
        )
    _same_bracket(event, label, bracket.start, source.compaction_id or "", source.source_command_id)


def _check_boundary(session: Session, event: TurnStart | TurnEnd) -> None:
    bracket = _open_bracket(session)
    if bracket is None:
        return
    owner = bracket.start.turn
    crossed = "an open standalone compaction" if owner is None else f"an open compaction for turn {owner}"
    _fail(
        event,
        f"{event.TYPE} cannot cross {crossed}",
        expected=f"compact/end of compaction {bracket.start.compaction_id} first",
        found=f"{event.TYPE} {event.turn}",
    )


# ---------------------------------------------------------------- shared checks


def _matching_open(
    session: Session, event: SessionEvent, label: str, compaction_id: str, command: str | None
) -> _Open:
    bracket = _open_bracket(session)
    if bracket is None:
        _fail(
            event,
            f"{label} has no matching compact/start",
            expected=f"an open compact/start of compaction {compaction_id}",
            found="no open compaction",
        )
    _same_bracket(event, label, bracket.start, compaction_id, command)
    return bracket


def _same_bracket(
    event: SessionEvent, label: str, start: CompactStart, compaction_id: str, command: str | None
) -> None:
    if compaction_id != start.compaction_id:
        _fail(
            event,
            f"{label} id {compaction_id} does not match compact/start id {start.compaction_id}",
            expected=start.compaction_id,
            found=compaction_id,
        )
    if command != start.source_command_id:
        _fail(
            event,
            f"{label} source_command_id {_owner(command)} does not match compact/start "
            f"source_command_id {_owner(start.source_command_id)}",
            expected=_owner(start.source_command_id),
            found=_owner(command),
        )


def _check_owner(session: Session, event: SessionEvent, label: str, owner: int | None) -> None:
    open_turn = session.open_turn
    if owner is None and open_turn is not None:
        _fail(
            event,
            f"{label} is standalone but turn {open_turn} is open",
            expected="no open turn",
            found=f"turn {open_turn}",
        )
    if owner is not None and open_turn is None:
        _fail(
            event,
            f"{label} for turn {owner} appended outside any open turn",
            expected=f"turn {owner} open",
            found="no open turn",
        )
    if owner is not None and open_turn != owner:
        _fail(
            event,
            f"{label} names turn {owner} but open turn is {open_turn}",
            expected=f"turn {owner}",
            found=f"turn {open_turn}",
        )


def _require_ids(event: SessionEvent, label: str, compaction_id: str, command: str | None) -> None:
    if not compaction_id:
        _fail(event, f"{label} compaction_id must be a non-empty string", "a compaction id", '""')
    if command is not None and not command:
        _fail(event, f"{label} source_command_id must be a non-empty string", "a command id", '""')


def _is_checkpoint_replacement(event: SessionEvent) -> bool:
    if not isinstance(event, UserMessage) or not isinstance(event.surface_op, Replace):
        return False
    source = event.message.source
    return source.kind == "plugin" and source.plugin == COMPACT_PLUGIN


def _owner(value: object) -> str:
    return "null" if value is None else str(value)


def _fail(event: SessionEvent, message: str, expected: str, found: str) -> NoReturn:
    raise BracketRuleError(
        RULE,
        event.seq,
        f'invariant violated by "{RULE}": {message} (seq {event.seq}; expected {expected}, found {found})',
        expected=expected,
        found=found,
    )


# ---------------------------------------------------------------- the whole log, for the audit


@dataclass(frozen=True)
class BracketViolation:
    seq: int
    message: str


def bracket_violations(session_id: object, events: Iterable[SessionEvent]) -> list[BracketViolation]:
    """Every event of a log the bracket invariant would reject, in seq order: each is checked
    against the log before it, then kept (so one bad record is reported once, not after it)."""
    folded = Session(session_id if isinstance(session_id, UUID) else None, check_invariants=False)
    found: list[BracketViolation] = []
    for event in events:
        try:
            check_brackets(folded, event)
        except BracketRuleError as e:
            found.append(BracketViolation(event.seq, str(e)))
        try:
            folded.append(event)
        except Exception as e:  # the audit's other checks report a log the session rules reject
            found.append(BracketViolation(event.seq, f"not replayable past here: {e}"))
            break
    return found
