"""Tool call ids are unique on the surface: the ``unique-call-ids`` invariant refuses an append that
would repeat one, and the audit finds one planted in a stored log (raw rows behind the store)."""

from __future__ import annotations

import uuid

import pytest
from eventsourcing.persistence import StoredEvent

from compaction.audit.report import audit_session
from compaction.errors import CallIdRuleError
from compaction.importers import import_path
from compaction.sessions.blocks import Message, Source, TextBlock, ToolCallBlock, ToolResultBlock
from compaction.sessions.call_ids import repeated_call_ids
from compaction.sessions.events import AssistantMessage, StepEnd, StepStart, ToolCall, ToolResult
from compaction.sessions.invariants import STRICT_INVARIANTS, UNIQUE_CALL_IDS
from compaction.sessions.mapper import encode_event
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from tests.builders import MODEL, end_turn, start_turn, user
from tests.conftest import PUBLIC_TRANSCRIPTS


def call_step(session: Session, *call_ids: str, answer: bool = True) -> int:
    """One step whose assistant message calls ``call_ids`` (each answered); the message's seq."""
    turn = session.open_turn
    assert turn is not None
    step = session.structure.next_step
    session.append(StepStart(turn=turn, step=step))
    calls = tuple(ToolCallBlock(c, "bash", '{"command": "ls"}') for c in call_ids)
    message = Message(
        id=f"a{len(session)}", role="assistant", content=(TextBlock("on it"), *calls), source=MODEL
    )
    seq = session.append(AssistantMessage(turn=turn, step=step, message=message, surface_op="append")).seq
    for call in calls if answer else ():
        dispatched = session.append(
            ToolCall(turn=turn, step=step, call_id=call.id, name="bash", arguments="{}")
        )
        result = Message(
            id=f"r{len(session)}",
            role="user",
            content=(ToolResultBlock(call.id, (TextBlock("a.txt"),)),),
            source=Source(kind="tool", call_id=call.id),
        )
        session.append(
            ToolResult(
                turn=turn, step=step, message=result, surface_op="append", source_event_seqs=(dispatched.seq,)
            )
        )
    session.append(StepEnd(turn=turn, step=step))
    return seq


def test_the_invariant_is_in_force_after_every_import() -> None:
    """Every imported session ends with a marker putting it in force; any session opts in."""
    assert UNIQUE_CALL_IDS in STRICT_INVARIANTS
    for path in PUBLIC_TRANSCRIPTS:
        for imported in import_path(path):
            assert UNIQUE_CALL_IDS in imported.session.invariants
    with SessionStore.open("memory://") as store:
        assert UNIQUE_CALL_IDS in store.create(invariants=STRICT_INVARIANTS).invariants


def test_an_append_repeating_a_call_id_on_the_surface_is_refused() -> None:
    session = Session()
    session.enforce(STRICT_INVARIANTS)
    user(session, "go")
    start_turn(session)
    call_step(session, "call_1")
    before = (len(session), tuple(session.nodes))
    turn, step = session.open_turn, session.structure.next_step
    assert turn is not None
    session.append(StepStart(turn=turn, step=step))
    again = Message(
        id="a-again", role="assistant", content=(ToolCallBlock("call_1", "bash", "{}"),), source=MODEL
    )
    with pytest.raises(
        CallIdRuleError, match=r"\[unique-call-ids\] tool call id 'call_1' is already on the surface"
    ):
        session.append(AssistantMessage(turn=turn, step=step, message=again, surface_op="append"))
    assert (len(session) - 1, tuple(session.nodes)) == before  # only the step/start was appended
    twice = Message(
        id="a-twice",
        role="assistant",
        content=(ToolCallBlock("call_2", "bash", "{}"), ToolCallBlock("call_2", "bash", "{}")),
        source=MODEL,
    )
    with pytest.raises(CallIdRuleError, match="'call_2' is twice in the message"):
        session.append(AssistantMessage(turn=turn, step=step, message=twice, surface_op="append"))


def test_the_index_follows_rollbacks() -> None:
    session = Session()
    session.enforce(STRICT_INVARIANTS)
    user(session, "go")
    start_turn(session)
    mark = session.mark()
    call_step(session, "call_1")
    session.rollback(mark)  # the call is gone from the log: its id is free again
    call_step(session, "call_1")
    end_turn(session)
    assert repeated_call_ids(list(session.events())) == []


def _planted() -> tuple[Session, int, int]:
    """A log with one call id twice on the surface (and the two messages' seqs): written without
    the invariant in force, as an older library (or a damaged import) could have written it."""
    session = Session()
    user(session, "go")
    start_turn(session)
    first = call_step(session, "toolu_01")
    call_step(session, "toolu_02")
    second = call_step(session, "toolu_01")
    end_turn(session)
    return session, first, second


def test_the_audit_fails_a_stored_log_with_a_call_id_twice_on_the_surface() -> None:
    planted, first, second = _planted()
    session_id = uuid.uuid4()
    with SessionStore.open("memory://") as store:
        rows = [StoredEvent(session_id, e.seq, e.TYPE, encode_event(e)) for e in planted.events()]
        store.application.recorder.insert_events(rows)  # raw rows, behind the store's back
        audit = audit_session(store, session_id)
        clean = store.create()
        user(clean, "go")
        start_turn(clean)
        call_step(clean, "toolu_01")
        end_turn(clean)
        store.save(clean)
        clean_audit = audit_session(store, clean.id)
    (check,) = [c for c in audit.log_checks if c.name == "unique-call-ids"]
    assert not check.passed and not audit.passed
    assert (
        f"seq {second} repeats tool call id 'toolu_01' while seq {first} is on the surface" in check.evidence
    )
    (passed,) = [c for c in clean_audit.log_checks if c.name == "unique-call-ids"]
    assert passed.passed, passed.evidence
