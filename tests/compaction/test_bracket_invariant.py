"""The compact/* bracket invariant, case by case, on every backend: each malformed record is
refused at append and, stored past the rules, refused again on load; its well-formed counterpart
is accepted both ways. Logs without the ``session/invariants`` marker (older logs, imports) keep
loading, and the audit's scan reports what they would violate."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import msgspec
import pytest

from compaction.errors import BracketRuleError
from compaction.sessions.blocks import TextBlock
from compaction.sessions.events import (
    Replace,
    SessionEvent,
    SessionResume,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    UserMessage,
    now_utc,
)
from compaction.sessions.invariants import DEFAULT_INVARIANTS
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from compaction.vocabulary.checkpoint import checkpoint_message
from compaction.vocabulary.events import CompactEnd, CompactStart, CompactSummary, Lease, ShadowedRange
from compaction.vocabulary.invariant import bracket_violations
from tests.builders import start_turn, turn, user

LEASE = Lease(host="test", pid=1, expires_at=datetime(2030, 1, 1, tzinfo=UTC))


def start(cid: str = "c1", owner: int | None = None, cmd: str | None = None) -> CompactStart:
    return CompactStart(compaction_id=cid, turn=owner, lease=LEASE, source_command_id=cmd)


def summary(
    session: Session,
    cid: str = "c1",
    *,
    seqs: tuple[int, ...] | None = None,
    shadowed: ShadowedRange | None = None,
    tokens: int = 40,
    cmd: str | None = None,
) -> CompactSummary:
    seqs = tuple(session.nodes[:-1]) if seqs is None else seqs
    shadowed = shadowed or (ShadowedRange(seqs[0], seqs[-1]) if seqs else ShadowedRange(0, 0))
    return CompactSummary(
        compaction_id=cid,
        summary=(TextBlock("what happened"),),
        shadowed_range=shadowed,
        shadowed_seqs=seqs,
        shadowed_token_count=tokens,
        provider="test",
        model="test-model",
        source_command_id=cmd,
    )


def end(
    cid: str = "c1", owner: int | None = None, error: str | None = None, cmd: str | None = None
) -> CompactEnd:
    return CompactEnd(compaction_id=cid, turn=owner, error=error, source_command_id=cmd)


def checkpoint(session: Session, cid: str = "c1", cmd: str | None = None) -> UserMessage:
    seqs = tuple(session.nodes[:-1])
    start_seq = session.last_of(CompactStart.TYPE)
    summary_seq = session.last_of(CompactSummary.TYPE)
    assert start_seq is not None and summary_seq is not None
    return UserMessage(
        message=checkpoint_message(cid, (TextBlock("what happened"),), cmd),
        surface_op=Replace(seqs[0], seqs[-1]),
        source_event_seqs=(start_seq, summary_seq, *seqs),
    )


def closed_turn() -> TurnEnd:
    return TurnEnd(turn=1, reason=TurnEndReason("completed"))


@dataclass(frozen=True)
class Case:
    bad: SessionEvent
    good: SessionEvent
    message: str


Situation = Callable[[Session], Case]


def _standalone_open(session: Session, cmd: str | None = None) -> None:
    session.append(start(cmd=cmd))


def _with_summary(session: Session, cmd: str | None = None) -> None:
    session.append(start(cmd=cmd))
    session.append(summary(session, cmd=cmd))


def summary_without_start(session: Session) -> Case:
    bad = summary(session)
    session_good = start()
    return Case(bad, session_good, "compact/summary has no matching compact/start")


def nested_start(session: Session) -> Case:
    _standalone_open(session)
    return Case(
        start("c2"), summary(session), "compact/start while standalone compaction is still compacting"
    )


def end_for_another_compaction(session: Session) -> Case:
    _with_summary(session)
    return Case(end("c2"), end("c1"), "compact/end id c2 does not match compact/start id c1")


def checkpoint_without_start(session: Session) -> Case:
    _with_summary(session)
    session.append(end("c1", error="failed"))
    return Case(
        msgspec.structs.replace(_checkpoint_after(session), surface_op=Replace(*_edges(session))),
        start("c2"),
        "compaction checkpoint has no matching compact/start",
    )


def checkpoint_of_another_id(session: Session) -> Case:
    _with_summary(session)
    return Case(
        checkpoint(session, "c9"), checkpoint(session, "c1"), "compaction checkpoint id c9 does not match"
    )


def numbered_start_outside_a_turn(session: Session) -> Case:
    return Case(start(owner=2), start(), "compact/start for turn 2 appended outside any open turn")


def numbered_start_naming_another_turn(session: Session) -> Case:
    user(session, "second")
    start_turn(session)
    return Case(start(owner=1), start(owner=2), "compact/start names turn 1 but open turn is 2")


def standalone_start_inside_a_turn(session: Session) -> Case:
    user(session, "second")
    start_turn(session)
    return Case(start(), start(owner=2), "compact/start is standalone but turn 2 is open")


def turn_start_crossing_a_standalone_bracket(session: Session) -> Case:
    _with_summary(session)
    return Case(TurnStart(turn=2), end(), "turn/start cannot cross an open standalone compaction")


def turn_end_crossing_a_numbered_bracket(session: Session) -> Case:
    user(session, "second")
    start_turn(session)
    session.append(start(owner=2))
    return Case(
        TurnEnd(turn=2, reason=TurnEndReason("completed")),
        end(owner=2, error="failed"),
        "turn/end cannot cross an open compaction for turn 2",
    )


def empty_compaction_id(session: Session) -> Case:
    return Case(start(""), start("c1"), "compact/start compaction_id must be a non-empty string")


def empty_command_id(session: Session) -> Case:
    return Case(
        start(cmd=""), start(cmd="cmd-1"), "compact/start source_command_id must be a non-empty string"
    )


def command_id_not_matching_the_start(session: Session) -> Case:
    _standalone_open(session, cmd="cmd-1")
    return Case(
        summary(session, cmd="cmd-2"),
        summary(session, cmd="cmd-1"),
        "compact/summary source_command_id cmd-2 does not match compact/start source_command_id cmd-1",
    )


def checkpoint_command_not_matching(session: Session) -> Case:
    _with_summary(session, cmd="cmd-1")
    return Case(
        checkpoint(session, cmd=None),
        checkpoint(session, cmd="cmd-1"),
        "compaction checkpoint source_command_id null does not match",
    )


def empty_shadowed_seqs(session: Session) -> Case:
    _standalone_open(session)
    return Case(
        summary(session, seqs=()), summary(session), "compact/summary shadowed_seqs must be non-empty"
    )


def shadowed_range_not_matching(session: Session) -> Case:
    _standalone_open(session)
    seqs = tuple(session.nodes[:-1])
    return Case(
        summary(session, shadowed=ShadowedRange(seqs[-1], seqs[0])),
        summary(session),
        "compact/summary shadowed_range must match the first and last shadowed_seqs",
    )


def negative_token_count(session: Session) -> Case:
    _standalone_open(session)
    return Case(
        summary(session, tokens=-1), summary(session, tokens=0), "shadowed_token_count must be a non-negative"
    )


def repeated_summary(session: Session) -> Case:
    _with_summary(session)
    return Case(summary(session), end(), "compact/summary repeated within one compaction")


def successful_end_without_summary(session: Session) -> Case:
    _standalone_open(session)
    return Case(
        end(), end(error="the summarizer failed"), "successful compact/end requires one compact/summary"
    )


def end_with_another_owner(session: Session) -> Case:
    user(session, "second")
    start_turn(session)
    session.append(start(owner=2))
    return Case(
        end(owner=None, error="x"),
        end(owner=2, error="x"),
        "compact/end owner null does not match compact/start owner 2",
    )


def end_seed_clears_an_inherited_bracket(session: Session) -> Case:
    _with_summary(session)  # the copy inherits an open bracket, then its end-seed
    session.append(SessionResume(host="copy", pid=2))
    return Case(summary(session), start("c2"), "compact/summary has no matching compact/start")


def repair_after_the_seed(session: Session) -> Case:
    _standalone_open(session)
    session.append(SessionResume(host="next", pid=3))
    return Case(
        end("c1"),
        end("c1", error="abandoned: a later session/resume; closed by recovery"),
        "compact/end has no matching compact/start",
    )


def turn_after_the_seed(session: Session) -> Case:
    user(session, "second")
    start_turn(session)
    session.append(start(owner=2))
    session.append(SessionResume(host="next", pid=3))
    return Case(
        start("c2", owner=None),
        TurnEnd(turn=2, reason=TurnEndReason("interrupted")),
        "is standalone but turn 2 is open",
    )


def _edges(session: Session) -> tuple[int, int]:
    nodes = session.nodes
    return nodes[0], nodes[-2]


def _checkpoint_after(session: Session) -> UserMessage:
    seqs = tuple(session.nodes[:-1])
    return UserMessage(
        message=checkpoint_message("c1", (TextBlock("what happened"),)),
        surface_op=Replace(seqs[0], seqs[-1]),
        source_event_seqs=seqs,
    )


CASES: dict[str, Situation] = {
    f.__name__: f
    for f in (
        summary_without_start,
        nested_start,
        end_for_another_compaction,
        checkpoint_without_start,
        checkpoint_of_another_id,
        numbered_start_outside_a_turn,
        numbered_start_naming_another_turn,
        standalone_start_inside_a_turn,
        turn_start_crossing_a_standalone_bracket,
        turn_end_crossing_a_numbered_bracket,
        empty_compaction_id,
        empty_command_id,
        command_id_not_matching_the_start,
        checkpoint_command_not_matching,
        empty_shadowed_seqs,
        shadowed_range_not_matching,
        negative_token_count,
        repeated_summary,
        successful_end_without_summary,
        end_with_another_owner,
        end_seed_clears_an_inherited_bracket,
        repair_after_the_seed,
        turn_after_the_seed,
    )
}


def _situation(store: SessionStore, name: str) -> tuple[Session, Case]:
    session = store.create(invariants=DEFAULT_INVARIANTS)
    turn(session, "first", steps=2)
    user(session, "keep me")
    case = CASES[name](session)
    store.save(session)
    return session, case


@pytest.mark.parametrize("name", CASES)
def test_a_malformed_record_is_refused_at_append_and_on_load(store: SessionStore, name: str) -> None:
    session, case = _situation(store, name)
    length = len(session)
    with pytest.raises(BracketRuleError, match="compact-brackets") as refused:
        session.append(case.bad)
    assert case.message in str(refused.value)
    assert f"(seq {length};" in str(refused.value)
    assert {"expected", "found"} <= set(refused.value.values)
    assert len(session) == length  # nothing appended
    stamped = msgspec.structs.replace(case.bad, seq=length, time=now_utc())
    store.append_events(session.id, [stamped])  # past the rules, as a foreign writer could
    with pytest.raises(BracketRuleError) as on_load:
        store.get(session.id, use_snapshots=False)
    assert case.message in str(on_load.value)


@pytest.mark.parametrize("name", CASES)
def test_the_well_formed_counterpart_is_accepted_and_loads(store: SessionStore, name: str) -> None:
    session, case = _situation(store, name)
    appended = session.append(case.good)
    store.save(session)
    loaded = store.get(session.id)
    assert loaded.event(appended.seq) == appended
    assert loaded.invariants == DEFAULT_INVARIANTS


def test_a_whole_manual_and_a_whole_turn_owned_bracket_pass(store: SessionStore) -> None:
    session = store.create(invariants=DEFAULT_INVARIANTS)
    turn(session, "first", steps=2)
    user(session, "keep me")
    session.append(start(cmd="cmd-1"))
    session.append(summary(session, cmd="cmd-1"))
    session.append(checkpoint(session, cmd="cmd-1"))
    session.append(end(cmd="cmd-1"))
    start_turn(session)
    session.append(start("c2", owner=2))
    session.append(summary(session, "c2"))
    session.append(checkpoint(session, "c2"))
    session.append(end("c2", owner=2))
    session.append(TurnEnd(turn=2, reason=TurnEndReason("completed")))
    store.save(session)
    assert store.get(session.id, use_snapshots=False).nodes == session.nodes


def test_a_log_without_the_marker_keeps_loading_and_the_audit_scan_reports_it(store: SessionStore) -> None:
    session = store.create()  # no marker: an older log, or an import
    turn(session, "first", steps=2)
    session.append(summary(session))  # a summary with no start
    session.enforce(DEFAULT_INVARIANTS)  # in force from here on only
    session.append(start("c5"))
    store.save(session)
    loaded = store.get(session.id, use_snapshots=False)
    assert loaded.invariants == DEFAULT_INVARIANTS
    found = bracket_violations(session.id, list(loaded.events()))
    assert [v.seq for v in found] == [session.last_of(CompactSummary.TYPE)]
    assert "compact/summary has no matching compact/start" in found[0].message


def test_the_invariant_survives_a_snapshot_restore() -> None:
    with SessionStore.open("memory://", snapshot_interval=5) as store:
        session = store.create(invariants=DEFAULT_INVARIANTS)
        turn(session, "first", steps=3)
        session.append(start())
        store.save(session)
        restored = store.get(session.id)
        assert restored.invariants == DEFAULT_INVARIANTS
        with pytest.raises(BracketRuleError, match="still compacting"):
            restored.append(start("c2"))
