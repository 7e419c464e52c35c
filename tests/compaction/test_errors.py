"""Every rejection names its rule, its seq, the rule's wording and the offending values.

One test per surface validation rule, per turn/step structure rule (docs/sessions.md), and for
the tool-pairing balance. Each rejected append must leave the session exactly as it was.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from compaction.errors import (
    CorruptSurfaceError,
    EventCompactionError,
    EventRuleError,
    StructureRuleError,
    SurfaceRuleError,
)
from compaction.sessions.blocks import (
    ImageBlock,
    Message,
    Source,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from compaction.sessions.events import (
    APPEND,
    UNSET_SEQ,
    UNSET_TIME,
    AssistantChunk,
    AssistantMessage,
    ContextMessage,
    Replace,
    RequestHeader,
    SessionEvent,
    StepEnd,
    StepStart,
    ToolCall,
    ToolError,
    ToolResult,
    TurnEnd,
    TurnEndReason,
    TurnStart,
)
from compaction.sessions.session import Session
from tests.builders import (
    MODEL,
    answer_step,
    end_turn,
    start_turn,
    state_of,
    tool_step,
    user,
    user_event,
)

# ---------------------------------------------------------------- helpers


def reject(
    session: Session, event: SessionEvent, error: type[EventRuleError], rule: str, *parts: str
) -> EventRuleError:
    """Append ``event``, expect ``error`` with ``rule`` and every text fragment; state unchanged."""
    before = state_of(session)
    expected_seq = event.seq if event.seq >= 0 else len(session)
    with pytest.raises(error) as caught:
        session.append(event)
    err = caught.value
    assert err.rule == rule
    assert err.seq == expected_seq
    for part in parts:
        assert part in str(err), f"{part!r} not in {str(err)!r}"
    assert isinstance(err, EventCompactionError)
    assert state_of(session) == before
    return err


def three_users() -> Session:
    session = Session()
    for text in ("a", "b", "c"):
        user(session, text)
    return session


def with_tool_result() -> tuple[Session, int]:
    """A closed turn with one tool step; returns the session and the tool/result seq."""
    session = Session()
    user(session, "task")
    start_turn(session)
    _, results = tool_step(session, output="full output")
    answer_step(session)
    end_turn(session)
    return session, results[0]


def rewrite(original: ToolResult, **changes: Any) -> ToolResult:
    """A replacement of ``original`` with new content plus ``changes`` (to data or message)."""
    message_changes = {k[8:]: v for k, v in changes.items() if k.startswith("message_")}
    data_changes = {k: v for k, v in changes.items() if not k.startswith("message_")}
    block = original.message.content[0]
    assert isinstance(block, ToolResultBlock)
    pruned = msgspec.structs.replace(block, content=(TextBlock("[pruned]"),))
    message = msgspec.structs.replace(original.message, content=(pruned,), **message_changes)
    return msgspec.structs.replace(
        original,
        seq=UNSET_SEQ,
        time=UNSET_TIME,
        message=message,
        surface_op=Replace(original.seq, original.seq),
        source_event_seqs=(original.seq,),
        **data_changes,
    )


def stored_result(session: Session, seq: int) -> ToolResult:
    event = session.event(seq)
    assert isinstance(event, ToolResult)
    return event


# ---------------------------------------------------------------- surface rule: contiguity


@pytest.mark.parametrize("seq", [4, 2, 0])
def test_contiguity_names_the_seq_and_the_expected_one(seq: int) -> None:
    session = three_users()
    err = reject(
        session,
        user_event("x", seq=seq),
        SurfaceRuleError,
        "contiguity",
        f"session event seq {seq} is not contiguous; expected 3",
    )
    assert err.values == {"expected": 3, "found": seq}


# ---------------------------------------------------------------- surface rule: marker eligibility


def test_log_only_type_cannot_carry_surface_op() -> None:
    reject(
        three_users(),
        TurnStart(turn=1, surface_op=APPEND),
        SurfaceRuleError,
        "eligibility",
        'session event "turn/start" is not surface-eligible and cannot carry surfaceOp',
    )


def test_log_only_type_cannot_carry_source_event_seqs() -> None:
    reject(
        three_users(),
        TurnStart(turn=1, source_event_seqs=(0,)),
        SurfaceRuleError,
        "eligibility",
        'session event "turn/start" is not surface-eligible and cannot carry sourceEventSeqs',
    )


def test_surface_type_requires_a_surface_op() -> None:
    reject(
        three_users(),
        user_event(op=None),
        SurfaceRuleError,
        "eligibility",
        'session event "user/message" is surface-eligible and requires a surfaceOp marker',
    )


def test_surface_op_must_be_append_or_a_replace_record() -> None:
    reject(
        three_users(),
        user_event(op="prepend"),
        SurfaceRuleError,
        "eligibility",
        'session event "user/message" carries an invalid surfaceOp',
        "'prepend'",
    )


@pytest.mark.parametrize(("start", "end"), [(-1, 1), (0, -2), (True, 1)])
def test_replace_ends_must_be_non_negative_integers(start: Any, end: Any) -> None:
    reject(
        three_users(),
        user_event(op=Replace(start, end), sources=(0, 1)),
        SurfaceRuleError,
        "eligibility",
        'session event "user/message" carries an invalid replace surfaceOp',
        f"start {start!r}, end {end!r}",
    )


# ---------------------------------------------------------------- surface rule: replace range


def test_replace_start_must_be_on_the_surface() -> None:
    session = three_users()
    session.append(TurnStart(turn=1))  # seq 3: in the log, not on the surface
    reject(
        session,
        user_event(op=Replace(3, 2), sources=(2, 3)),
        SurfaceRuleError,
        "replace-range",
        "surface replace: start seq 3 not found in surface",
    )


def test_replace_end_must_be_on_the_surface() -> None:
    reject(
        three_users(),
        user_event(op=Replace(0, 7), sources=(0, 1, 2)),
        SurfaceRuleError,
        "replace-range",
        "surface replace: end seq 7 not found in surface",
    )


def test_a_shadowed_seq_is_no_longer_a_valid_endpoint() -> None:
    session = three_users()
    session.append(user_event("sum", op=Replace(0, 1), sources=(0, 1)))
    reject(
        session,
        user_event("again", op=Replace(1, 2), sources=(1, 2)),
        SurfaceRuleError,
        "replace-range",
        "surface replace: start seq 1 not found in surface",
    )


def test_replace_start_must_not_come_after_end_on_the_surface() -> None:
    reject(
        three_users(),
        user_event(op=Replace(2, 0), sources=(0, 1, 2)),
        SurfaceRuleError,
        "replace-range",
        "surface replace: start seq 2 (index 2) is after end seq 0 (index 0)",
    )


def test_positions_not_numbers_decide_the_order() -> None:
    """After a replacement at the head, a numerically reversed range is the valid one."""
    session = three_users()
    session.append(user_event("sum", op=Replace(0, 1), sources=(0, 1)))  # nodes [3, 2]
    reject(
        session,
        user_event("x", op=Replace(2, 3), sources=(2, 3)),
        SurfaceRuleError,
        "replace-range",
        "start seq 2 (index 1) is after end seq 3 (index 0)",
    )
    session.append(user_event("y", op=Replace(3, 2), sources=(2, 3)))
    assert session.nodes == [4]


# ---------------------------------------------------------------- surface rule: provenance


def test_source_event_seqs_must_be_an_array() -> None:
    reject(
        three_users(),
        user_event(sources=1),
        SurfaceRuleError,
        "provenance",
        "sourceEventSeqs on event at seq 3 must be an array when present",
        "int 1",
    )


def test_source_event_seqs_must_not_be_empty_except_on_assistant_messages() -> None:
    session = three_users()
    reject(
        session,
        user_event(sources=()),
        SurfaceRuleError,
        "provenance",
        "sourceEventSeqs must not be empty except on assistant/message",
        '"user/message"',
    )
    start_turn(session)
    session.append(StepStart(turn=1, step=1))
    empty = Message(id="a", role="assistant", content=(TextBlock("ok"),), source=MODEL)
    accepted = session.append(
        AssistantMessage(turn=1, step=1, message=empty, surface_op=APPEND, source_event_seqs=())
    )
    assert accepted.source_event_seqs == ()


@pytest.mark.parametrize("bad", [-1, "1", 1.0, True])
def test_source_event_seqs_must_be_non_negative_integers(bad: Any) -> None:
    reject(
        three_users(),
        user_event(sources=(0, bad)),
        SurfaceRuleError,
        "provenance",
        'session event "user/message" sourceEventSeqs must densely contain non-negative safe integers',
        f"found {bad!r}",
    )


def test_source_event_seqs_must_not_repeat() -> None:
    reject(
        three_users(),
        user_event(sources=(0, 2, 0)),
        SurfaceRuleError,
        "provenance",
        "sourceEventSeqs must not contain duplicates",
        "0 repeats at seq 3",
    )


@pytest.mark.parametrize("future", [3, 9])
def test_source_event_seqs_must_reference_earlier_events(future: int) -> None:
    reject(
        three_users(),
        user_event(sources=(1, future)),
        SurfaceRuleError,
        "provenance",
        f"sourceEventSeqs must reference earlier events: {future} >= current seq 3",
    )


def test_a_replacement_must_cite_every_shadowed_node() -> None:
    reject(
        three_users(),
        user_event(op=Replace(0, 2), sources=(1,)),
        SurfaceRuleError,
        "provenance",
        "surface replace: sourceEventSeqs must include every shadowed surface node; missing 0, 2",
    )


def test_a_replacement_without_sources_misses_every_shadowed_node() -> None:
    err = reject(
        three_users(),
        user_event(op=Replace(0, 2)),
        SurfaceRuleError,
        "provenance",
        "missing 0, 1, 2",
    )
    assert err.values == {"missing": [0, 1, 2]}


# ---------------------------------------------------------------- surface rule: tool-result rewrite


def test_a_tool_result_rewrite_shadows_exactly_one_node() -> None:
    session, result_seq = with_tool_result()
    original = stored_result(session, result_seq)
    wide = msgspec.structs.replace(
        rewrite(original),
        surface_op=Replace(result_seq - 2, result_seq),
        source_event_seqs=(result_seq - 2, result_seq),
    )
    reject(
        session,
        wide,
        SurfaceRuleError,
        "tool-result-rewrite",
        "tool/result surface replacement must rewrite exactly one current node",
        f"shadows 2 (seqs {result_seq - 2}, {result_seq})",
    )


def test_a_tool_result_rewrite_must_target_a_tool_result() -> None:
    session, result_seq = with_tool_result()
    assistant_seq = result_seq - 2
    original = stored_result(session, result_seq)
    wrong = msgspec.structs.replace(
        rewrite(original),
        surface_op=Replace(assistant_seq, assistant_seq),
        source_event_seqs=(assistant_seq,),
    )
    reject(
        session,
        wrong,
        SurfaceRuleError,
        "tool-result-rewrite",
        "tool/result surface replacement must target a current tool/result",
        f"seq {assistant_seq} is assistant/message",
    )


@pytest.mark.parametrize(
    "changes",
    [
        {"message_id": "another-id"},
        {"message_source": Source(kind="tool", call_id="other")},
        {"turn": 9},
        {"step": 9},
        {"error": ToolError("Boom", "E")},
        {"meta": {"k": 1}},
        {"synthesized": True},
    ],
    ids=lambda c: next(iter(c)),
)
def test_a_tool_result_rewrite_may_change_only_content(changes: dict[str, Any]) -> None:
    session, result_seq = with_tool_result()
    reject(
        session,
        rewrite(stored_result(session, result_seq), **changes),
        SurfaceRuleError,
        "tool-result-rewrite",
        "tool/result surface replacement may change only content",
        f"replacing seq {result_seq} at seq {len(session)}",
    )


@pytest.mark.parametrize(
    "head",
    [
        ToolResultBlock("someone-else", (TextBlock("x"),)),
        ToolResultBlock("keep", (TextBlock("x"),), is_error=True),
        TextBlock("not a tool-result block"),
    ],
    ids=["tool-call-id", "is-error", "block-type"],
)
def test_a_tool_result_rewrite_keeps_the_block_identity(head: Any) -> None:
    session, result_seq = with_tool_result()
    original = stored_result(session, result_seq)
    block = original.message.content[0]
    assert isinstance(block, ToolResultBlock)
    if isinstance(head, ToolResultBlock) and head.tool_call_id == "keep":
        head = msgspec.structs.replace(head, tool_call_id=block.tool_call_id)
    candidate = rewrite(original)
    candidate = msgspec.structs.replace(
        candidate, message=msgspec.structs.replace(candidate.message, content=(head,))
    )
    reject(
        session,
        candidate,
        SurfaceRuleError,
        "tool-result-rewrite",
        "may change only content",
    )


def test_a_tool_result_rewrite_keeps_the_blocks_after_the_first() -> None:
    session, result_seq = with_tool_result()
    candidate = rewrite(stored_result(session, result_seq))
    extra = ImageBlock(attachment_id="img", media_type="image/png")
    candidate = msgspec.structs.replace(
        candidate,
        message=msgspec.structs.replace(candidate.message, content=(*candidate.message.content, extra)),
    )
    reject(session, candidate, SurfaceRuleError, "tool-result-rewrite", "may change only content")


def test_a_tool_result_rewrite_of_content_alone_is_accepted() -> None:
    session, result_seq = with_tool_result()
    start_turn(session)  # inside an open turn, where the reference harness requires a rewrite to be
    original = stored_result(session, result_seq)
    position = session.nodes.index(result_seq)
    accepted = session.append(rewrite(original))
    assert session.nodes[position] == accepted.seq
    unchanged = msgspec.structs.replace(
        rewrite(original), message=original.message, source_event_seqs=(accepted.seq,)
    )
    unchanged = msgspec.structs.replace(unchanged, surface_op=Replace(accepted.seq, accepted.seq))
    generation = session.surface.generation
    session.append(unchanged)  # a no-op rewrite still counts as a replacement
    assert session.surface.generation == generation + 1


# ---------------------------------------------------------------- turn/step structure


def open_step_session() -> Session:
    session = Session()
    user(session, "task")
    start_turn(session)
    session.append(StepStart(turn=1, step=1))
    return session


def test_turn_start_while_a_turn_is_open() -> None:
    session = Session()
    start_turn(session)
    reject(
        session,
        TurnStart(turn=2),
        StructureRuleError,
        "structure",
        "turn/start 2 while turn 1 is still open",
    )


@pytest.mark.parametrize("turn", [2, 0])
def test_turn_start_must_take_the_next_number(turn: int) -> None:
    reject(
        Session(),
        TurnStart(turn=turn),
        StructureRuleError,
        "structure",
        f"turn/start expected turn 1, got {turn}",
    )


def test_turn_end_must_match_the_open_turn() -> None:
    session = Session()
    reject(
        session,
        TurnEnd(turn=1, reason=TurnEndReason("completed")),
        StructureRuleError,
        "structure",
        "turn/end 1 does not match open turn null",
    )
    start_turn(session)
    reject(
        session,
        TurnEnd(turn=2, reason=TurnEndReason("completed")),
        StructureRuleError,
        "structure",
        "turn/end 2 does not match open turn 1",
    )


def test_turn_end_while_a_step_is_open() -> None:
    reject(
        open_step_session(),
        TurnEnd(turn=1, reason=TurnEndReason("completed")),
        StructureRuleError,
        "structure",
        "turn/end 1 while step 1 is still open",
    )


def test_step_start_must_name_the_open_turn() -> None:
    session = Session()
    reject(
        session,
        StepStart(turn=1, step=1),
        StructureRuleError,
        "structure",
        "step/start in turn 1 but open turn is null",
    )
    start_turn(session)
    reject(
        session,
        StepStart(turn=2, step=1),
        StructureRuleError,
        "structure",
        "step/start in turn 2 but open turn is 1",
    )


def test_step_start_while_a_step_is_open() -> None:
    reject(
        open_step_session(),
        StepStart(turn=1, step=2),
        StructureRuleError,
        "structure",
        "step/start 2 while step 1 is still open",
    )


def test_step_start_must_take_the_next_number() -> None:
    session = Session()
    start_turn(session)
    answer_step(session)
    reject(
        session,
        StepStart(turn=1, step=3),
        StructureRuleError,
        "structure",
        "step/start expected step 2 in turn 1, got 3",
    )


def test_steps_restart_at_one_in_every_turn() -> None:
    session = Session()
    start_turn(session)
    answer_step(session)
    end_turn(session)
    session.append(TurnStart(turn=2))
    reject(
        session,
        StepStart(turn=2, step=2),
        StructureRuleError,
        "structure",
        "step/start expected step 1 in turn 2, got 2",
    )


def _assistant(turn: int, step: int) -> AssistantMessage:
    message = Message(id="a", role="assistant", content=(TextBlock("hi"),), source=MODEL)
    return AssistantMessage(turn=turn, step=step, message=message, surface_op=APPEND)


def _tool_result(turn: int, step: int, call_id: str, *, error: ToolError | None = None) -> ToolResult:
    block = ToolResultBlock(call_id, (TextBlock("out"),), is_error=error is not None)
    source = Source(kind="tool", call_id=call_id)
    message = Message(id=f"r-{call_id}", role="user", content=(block,), source=source)
    return ToolResult(turn=turn, step=step, message=message, error=error, surface_op=APPEND)


@pytest.mark.parametrize(
    "event",
    [
        StepEnd(turn=1, step=2),
        AssistantChunk(turn=2, step=1, chunk="x"),
        _assistant(1, 2),
        ToolCall(turn=1, step=2, call_id="c", name="bash", arguments="{}"),
        _tool_result(2, 1, "c"),
    ],
    ids=lambda e: e.TYPE,
)
def test_step_events_must_name_the_open_turn_and_step(event: SessionEvent) -> None:
    reject(
        open_step_session(),
        event,
        StructureRuleError,
        "structure",
        f"{event.TYPE} names turn {event.turn}/step {event.step} "  # type: ignore[attr-defined]
        "but open is turn 1/step 1",
    )


def test_step_events_outside_any_step_render_null() -> None:
    session = Session()
    start_turn(session)
    reject(
        session,
        _assistant(1, 1),
        StructureRuleError,
        "structure",
        "assistant/message names turn 1/step 1 but open is turn 1/step null",
    )


def test_a_tool_result_needs_a_pending_call_of_the_same_step() -> None:
    session = open_step_session()
    reject(
        session,
        _tool_result(1, 1, "c9"),
        StructureRuleError,
        "structure",
        "tool/result for c9 with no prior tool/call in this step",
    )
    session.append(ToolCall(turn=1, step=1, call_id="c9", name="bash", arguments="{}"))
    session.append(StepEnd(turn=1, step=1))
    session.append(StepStart(turn=1, step=2))
    reject(  # step/end cleared the pending set
        session,
        _tool_result(1, 2, "c9"),
        StructureRuleError,
        "structure",
        "tool/result for c9 with no prior tool/call in this step",
    )


def test_a_not_started_repair_result_needs_no_pending_call() -> None:
    session = open_step_session()
    not_started = ToolError("ToolNotStartedError", "TOOL_NOT_STARTED")
    session.append(_tool_result(1, 1, "never-dispatched", error=not_started))
    flagged_only = _tool_result(1, 1, "other", error=not_started)
    block = flagged_only.message.content[0]
    assert isinstance(block, ToolResultBlock)
    not_an_error = msgspec.structs.replace(
        flagged_only,
        message=msgspec.structs.replace(
            flagged_only.message,
            content=(msgspec.structs.replace(block, is_error=False),),
        ),
    )
    reject(  # the repair exemption also needs content[0].is_error
        session,
        not_an_error,
        StructureRuleError,
        "structure",
        "tool/result for other with no prior tool/call in this step",
    )


def test_request_header_needs_an_open_turn() -> None:
    reject(
        Session(),
        RequestHeader(provider="p", model="m"),
        StructureRuleError,
        "structure",
        "request/header appended outside any open turn (core execution events must be turn-enclosed)",
    )


def test_unconstrained_events_pass_anywhere_and_strict_off_skips_structure() -> None:
    session = Session()
    user(session, "between turns")
    session.append(
        ContextMessage(message=Message(id="ctx", role="user", content=(TextBlock("f"),)), surface_op=APPEND)
    )
    loose = Session(strict_structure=False)
    loose.append(StepEnd(turn=7, step=7))
    loose.append(_tool_result(3, 3, "nobody"))
    assert len(session) == 2
    assert len(loose) == 2


# ---------------------------------------------------------------- tool-pairing balance


def test_a_tool_result_without_a_call_is_a_corrupt_surface() -> None:
    session = Session(strict_structure=False)
    user(session, "task")
    orphan = session.append(_tool_result(1, 1, "c1")).seq
    with pytest.raises(CorruptSurfaceError) as caught:
        session.surface.cuts()
    assert caught.value.seq == orphan
    assert str(caught.value) == (
        f"tool-pairing balance: tool/result at surface seq {orphan} has no matching tool-call "
        "(corrupt surface)"
    )
    with pytest.raises(CorruptSurfaceError, match=f"surface seq {orphan} has no matching"):
        session.surface.balanced_after(0)  # fails identically on retry


def test_balance_counts_results_and_does_not_match_ids() -> None:
    session = Session(strict_structure=False)
    calls = (ToolCallBlock("c1", "bash", "{}"),)
    message = Message(id="a", role="assistant", content=calls, source=MODEL)
    session.append(AssistantMessage(turn=1, step=1, message=message, surface_op=APPEND))
    session.append(_tool_result(1, 1, "unrelated-id"))
    assert session.surface.cuts() == [0, 1, 0]
    session.append(_tool_result(1, 1, "c1"))
    with pytest.raises(CorruptSurfaceError, match="tool/result at surface seq 2"):
        session.surface.is_balanced()


def test_a_replacement_that_drops_calls_corrupts_the_surface() -> None:
    """Replacing an assistant message with a user message strands its results."""
    session, result_seq = with_tool_result()
    assistant_seq = result_seq - 2
    session.append(user_event("sum", op=Replace(assistant_seq, assistant_seq), sources=(assistant_seq,)))
    with pytest.raises(CorruptSurfaceError) as caught:
        session.surface.cuts()
    assert caught.value.seq == result_seq


def test_balance_of_a_seq_not_on_the_surface() -> None:
    session = three_users()
    session.append(TurnStart(turn=1))
    with pytest.raises(CorruptSurfaceError) as caught:
        session.surface.balanced_before(3)
    assert caught.value.seq == 3
    assert str(caught.value) == "tool-pairing balance: surface seq 3 not found"
