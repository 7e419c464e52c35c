"""The positional surface and the tool-pairing balance over it."""

from __future__ import annotations

import msgspec
import pytest

from compaction.errors import CorruptSurfaceError, SurfaceRuleError
from compaction.sessions.blocks import Block, Message, Source, TextBlock, ToolCallBlock, ToolResultBlock
from compaction.sessions.events import (
    APPEND,
    UNSET_SEQ,
    UNSET_TIME,
    AssistantMessage,
    ContextMessage,
    Replace,
    StepEnd,
    StepStart,
    ToolCall,
    ToolResult,
    TurnStart,
)
from compaction.sessions.session import Session, project
from compaction.sessions.surface import PackedInts, Surface
from tests.builders import MODEL, answer_step, start_turn, tool_step, turn, user, user_event


def replace(session: Session, start: int, end: int, text: str = "summary") -> int:
    """Replace the span start..end (by position) with a user message citing every shadowed seq."""
    i, j = session.nodes.index(start), session.nodes.index(end)
    shadowed = tuple(session.nodes[i : j + 1])
    return session.append(user_event(text, op=Replace(start, end), sources=shadowed)).seq


def texts(session: Session) -> list[str]:
    out = []
    for message in session.derive_messages():
        block = message.content[0]
        out.append(block.text if isinstance(block, TextBlock) else type(block).__name__)
    return out


def assistant_with_calls(session: Session, turn: int, step: int, *call_ids: str) -> int:
    calls = tuple(ToolCallBlock(c, "bash", "{}") for c in call_ids)
    content: tuple[Block, ...] = (TextBlock("calling"), *calls)
    message = Message(id=f"a{len(session)}", role="assistant", content=content, source=MODEL)
    return session.append(AssistantMessage(turn=turn, step=step, message=message, surface_op=APPEND)).seq


def result(session: Session, turn: int, step: int, call_id: str) -> int:
    block = ToolResultBlock(call_id, (TextBlock(f"out {call_id}"),))
    source = Source(kind="tool", call_id=call_id)
    message = Message(id=f"r-{call_id}", role="user", content=(block,), source=source)
    return session.append(ToolResult(turn=turn, step=step, message=message, surface_op=APPEND)).seq


# ---------------------------------------------------------------- appending and replacing


def test_surface_events_join_the_surface_and_log_only_events_do_not() -> None:
    session = Session()
    user(session, "task")
    start_turn(session)  # turn/start + request/header: log-only
    assistant_seq, results = tool_step(session)
    assert session.nodes == [0, assistant_seq, *results]
    assert session.surface.length == len(session) == 8
    assert [session.event(s).TYPE for s in session.nodes] == [
        "user/message",
        "assistant/message",
        "tool/result",
    ]


def test_replace_splices_at_the_first_shadowed_position() -> None:
    session = Session()
    for text in "abcde":
        user(session, text)
    seq = replace(session, 1, 3)
    assert seq == 5
    assert session.nodes == [0, 5, 4]
    assert session.surface.generation == 1
    assert texts(session) == ["a", "summary", "e"]
    assert len(session) == 6  # shadowed events stay in the log
    assert session.event(2).message.content == (TextBlock("c"),)  # type: ignore[attr-defined]


def test_start_equal_to_end_replaces_one_node() -> None:
    session = Session()
    for text in "ab":
        user(session, text)
    replace(session, 1, 1, "b2")
    assert session.nodes == [0, 2]
    assert texts(session) == ["a", "b2"]


def test_a_numerically_reversed_range_is_valid_by_position() -> None:
    """Nodes [2, 1] replaced by {start: 2, end: 1}: the range is located by position."""
    session = Session()
    user(session, "a")
    user(session, "b")
    replace(session, 0, 0, "a2")
    assert session.nodes == [2, 1]
    replace(session, 2, 1, "all")
    assert session.nodes == [3]
    assert session.surface.generation == 2


def test_context_appended_during_a_span_keeps_its_later_position() -> None:
    """The checkpoint sits where the span was, later nodes stay after it."""
    session = Session()
    for text in "abc":
        user(session, text)
    session.append(
        ContextMessage(
            message=Message(id="ctx", role="user", content=(TextBlock("late context"),)),
            surface_op=APPEND,
        )
    )
    replace(session, 0, 2, "checkpoint")
    assert texts(session) == ["checkpoint", "late context"]
    assert session.nodes == [4, 3]


def test_plan_validates_without_mutating_and_apply_commits() -> None:
    session = Session()
    user(session, "a")
    surface = session.surface.copy()
    event = msgspec.structs.replace(user_event("b", op=Replace(0, 0), sources=(0,)), seq=1)
    plan = surface.plan(event, session.event)
    assert (surface.nodes, surface.generation, surface.length) == ([0], 0, 1)
    assert plan.is_replace and plan.shadowed == (0,)
    surface.apply(plan)
    assert (surface.nodes, surface.generation, surface.length) == ([1], 1, 2)
    assert session.nodes == [0]  # the copy is independent


def test_restore_rebuilds_positions_lazily() -> None:
    restored = Surface.restore([5, 2, 9], [0, 1, -1], generation=3, length=10)
    assert restored.position(9) == 2
    assert 2 in restored and 4 not in restored
    assert restored.cuts() == [0, 0, 1, 0]


def test_a_snapshot_restores_the_surface_as_packed_arrays_that_compare_like_lists() -> None:
    """A snapshot's surface is adopted as packed int arrays (one copy of its bytes, no int object
    per node: a 100k-event session never compacted loads within 2x of a 1k one), which still
    compare equal to the lists and tuples of the same seqs and differ from other ones."""
    session = Session()
    for text in "abcd":
        user(session, text)
    restored = Session.from_snapshot(session.id, session.snapshot(), lambda lo, hi: [])
    nodes = restored.nodes
    assert isinstance(nodes, PackedInts) and nodes.typecode == "q"
    assert isinstance(restored.surface.deltas, PackedInts)
    expected = [0, 1, 2, 3]
    assert nodes == expected and nodes == (0, 1, 2, 3) and expected == nodes  # both sides
    assert nodes not in ([0, 1, 2], [0, 1, 2, 4])
    assert nodes != "0123"
    assert nodes == session.nodes and list(nodes) == list(session.nodes)
    with pytest.raises(TypeError):
        hash(nodes)


def test_mark_and_rollback_undo_appends_and_replacements() -> None:
    surface = Surface()
    session = Session()
    for text in "abc":
        user(session, text)
    for seq in range(3):
        surface.fold(session.event(seq), session.event)
    appends_only = surface.mark(replaces=False)
    kept = surface.mark(replaces=True)
    surface.fold(msgspec.structs.replace(user_event("d"), seq=3), session.event)
    assert surface.nodes == [0, 1, 2, 3]
    surface.rollback(appends_only)
    assert (surface.nodes, surface.length, surface.position(3)) == ([0, 1, 2], 3, None)
    replacement = msgspec.structs.replace(user_event("s", op=Replace(0, 1), sources=(0, 1)), seq=3)
    surface.fold(replacement, session.event)
    assert (surface.nodes, surface.generation) == ([3, 2], 1)
    surface.rollback(kept)
    assert (surface.nodes, surface.generation, surface.cuts()) == ([0, 1, 2], 0, [0, 0, 0, 0])


# ---------------------------------------------------------------- tool-result rewrites


def test_a_tool_result_rewrite_changes_only_what_the_model_sees() -> None:
    session = Session()
    user(session, "task")
    start_turn(session)
    _, results = tool_step(session, output="x" * 500)
    original = session.event(results[0])
    assert isinstance(original, ToolResult)
    block = original.message.content[0]
    assert isinstance(block, ToolResultBlock)
    pruned = msgspec.structs.replace(block, content=(TextBlock("[pruned 500 chars]"),))
    rewrite = msgspec.structs.replace(
        original,
        seq=UNSET_SEQ,
        time=UNSET_TIME,
        message=msgspec.structs.replace(original.message, content=(pruned,)),
        surface_op=Replace(original.seq, original.seq),
        source_event_seqs=(original.seq,),
    )
    new_seq = session.append(rewrite).seq
    assert session.nodes[-1] == new_seq
    last = session.derive_messages()[-1]
    assert last.id == original.message.id
    assert last.content == (pruned,)
    assert session.surface.is_balanced()  # the rewrite is still a result: delta -1


# ---------------------------------------------------------------- derive_messages


def test_derive_messages_projects_surface_nodes_in_order() -> None:
    session = Session()
    user(session, "task")
    start_turn(session)
    session.append(StepStart(turn=1, step=1))
    empty = Message(id="empty", role="assistant", content=(), source=MODEL)
    empty_seq = session.append(AssistantMessage(turn=1, step=1, message=empty, surface_op=APPEND)).seq
    session.append(StepEnd(turn=1, step=1))
    answer_step(session, "done")
    assert empty_seq in session.nodes  # a node priced 0 that projects to nothing
    assert project(session.event(empty_seq)) is None
    assert texts(session) == ["task", "done"]
    assert [m.role for m in session.derive_messages()] == ["user", "assistant"]


def test_derive_messages_is_a_fresh_list_rebuilt_after_a_replacement() -> None:
    session = Session()
    for text in "abc":
        user(session, text)
    first = session.derive_messages()
    first.clear()
    assert texts(session) == ["a", "b", "c"]
    replace(session, 0, 1, "ab")
    assert texts(session) == ["ab", "c"]
    user(session, "d")
    assert texts(session) == ["ab", "c", "d"]
    assert session.derive_messages()[0] is session.derive_messages()[0]  # shared, immutable


def test_messages_at_shows_the_surface_as_it_was() -> None:
    session = Session()
    for text in "abc":
        user(session, text)
    replace(session, 0, 2, "abc")
    assert [m.content[0].text for m in session.messages_at(2)] == ["a", "b", "c"]  # type: ignore[union-attr]
    assert [m.content[0].text for m in session.messages_at(3)] == ["abc"]  # type: ignore[union-attr]


# ---------------------------------------------------------------- tool-pairing balance


def test_cuts_follow_calls_and_results_in_surface_order() -> None:
    session = Session()
    user(session, "task")  # 0
    session.append(TurnStart(turn=1))  # 1
    session.append(StepStart(turn=1, step=1))  # 2
    call_seq = assistant_with_calls(session, 1, 1, "c1", "c2")  # 3
    session.append(ToolCall(turn=1, step=1, call_id="c1", name="bash", arguments="{}"))  # 4
    first = result(session, 1, 1, "c1")  # 5
    session.append(ToolCall(turn=1, step=1, call_id="c2", name="bash", arguments="{}"))  # 6
    second = result(session, 1, 1, "c2")  # 7
    assert session.nodes == [0, call_seq, first, second]
    assert session.surface.cuts() == [0, 0, 2, 1, 0]
    assert session.surface.balanced_before(0) and session.surface.balanced_after(0)
    assert session.surface.balanced_before(call_seq)
    assert not session.surface.balanced_after(call_seq)  # unbalanced until all results follow
    assert not session.surface.balanced_after(first)
    assert session.surface.balanced_after(second)
    assert session.surface.is_balanced()


def test_a_neutral_node_between_a_call_and_its_result_is_unbalanced_on_both_sides() -> None:
    session = Session()
    session.append(TurnStart(turn=1))
    session.append(StepStart(turn=1, step=1))
    call_seq = assistant_with_calls(session, 1, 1, "c1")
    injected = session.append(user_event("steer")).seq
    session.append(ToolCall(turn=1, step=1, call_id="c1", name="bash", arguments="{}"))
    result(session, 1, 1, "c1")
    assert not session.surface.balanced_before(injected)
    assert not session.surface.balanced_after(injected)
    assert session.surface.balanced_before(call_seq)


def test_a_checkpoint_at_the_head_is_balanced_on_both_sides() -> None:
    session = Session()
    turn(session, n_calls=2)
    tail = user(session, "next")
    checkpoint = replace(session, 0, session.nodes[-2])
    assert session.nodes == [checkpoint, tail]
    assert session.surface.balanced_before(checkpoint)
    assert session.surface.balanced_after(checkpoint)
    assert session.surface.cuts() == [0, 0, 0]


def test_the_balance_cache_folds_only_the_new_tail_and_resets_on_replacement() -> None:
    session = Session()
    for text in "ab":
        user(session, text)
    cuts = session.surface.cuts()
    assert cuts == [0, 0, 0]
    user(session, "c")
    assert session.surface.cuts() is cuts  # extended in place
    assert cuts == [0, 0, 0, 0]
    replace(session, 0, 1)
    assert session.surface.cuts() == [0, 0, 0]


def test_a_failing_tail_leaves_no_partial_cache() -> None:
    session = Session(strict_structure=False)
    user(session, "a")
    assert session.surface.cuts() == [0, 0]
    assistant_with_calls(session, 1, 1, "c1")
    orphan_a = result(session, 1, 1, "c1")
    orphan_b = result(session, 1, 1, "c2")
    for _ in range(2):
        with pytest.raises(CorruptSurfaceError) as caught:
            session.surface.cuts()
        assert caught.value.seq == orphan_b
    assert session.surface._cuts == [0, 0]  # nothing of the failing tail was kept
    assert orphan_a in session.nodes


def test_a_rejected_replacement_leaves_the_surface_intact() -> None:
    session = Session()
    for text in "abc":
        user(session, text)
    cuts = list(session.surface.cuts())
    with pytest.raises(SurfaceRuleError):
        session.append(user_event("x", op=Replace(0, 2), sources=(0, 1)))
    assert session.nodes == [0, 1, 2]
    assert session.surface.generation == 0
    assert session.surface.cuts() == cuts
    assert session.surface.position(2) == 2
