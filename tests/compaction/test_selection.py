"""Which span is compacted: the retention walk from the tail, snapping toward the head
to a tool-pairing balanced cut, the open tail, and the task statement kept structurally."""

from __future__ import annotations

import pytest

from compaction.engine.meters import HeuristicMeter
from compaction.engine.selection import select_span, span_for
from compaction.errors import SpanError
from compaction.sessions.blocks import Message, TextBlock
from compaction.sessions.events import ContextMessage
from compaction.sessions.session import Session
from tests.builders import start_turn, tool_step, user
from tests.compaction.test_support import text_of_price


@pytest.fixture
def meter() -> HeuristicMeter:
    return HeuristicMeter()


def five_messages(session: Session) -> list[int]:
    """The task, then five standalone messages of 20 tokens each."""
    user(session, "fix the failing build")
    return [user(session, text_of_price(20)) for _ in range(5)]


def test_prices_of_the_fixture_are_exact(meter: HeuristicMeter) -> None:
    session = Session()
    seqs = five_messages(session)
    assert [meter.node_price(session, s) for s in seqs] == [20] * 5


@pytest.mark.parametrize(
    ("retain", "retained"),
    [
        (1, 1),  # the newest node alone reaches 1
        (20, 1),  # exactly reached by the newest node: it is the crossing node
        (21, 2),  # the node that crosses the budget is retained
        (30, 2),
        (40, 2),  # reached inclusively (>=)
        (41, 3),
    ],
)
def test_the_node_that_crosses_the_budget_is_retained(
    meter: HeuristicMeter, retain: int, retained: int
) -> None:
    session = Session()
    seqs = five_messages(session)
    span = select_span(session, meter, retain)
    assert span is not None
    assert span.seqs == tuple(seqs[: 5 - retained])
    assert (span.first, span.last) == (1, 5 - retained)


def test_retain_zero_keeps_the_newest_node(meter: HeuristicMeter) -> None:
    session = Session()
    seqs = five_messages(session)
    span = select_span(session, meter, 0)
    assert span is not None
    assert span.seqs == tuple(seqs[:4])
    assert session.nodes[-1] == seqs[-1] and seqs[-1] not in span.seqs


def test_nothing_old_enough_gives_none(meter: HeuristicMeter) -> None:
    session = Session()
    five_messages(session)
    assert select_span(session, meter, 100) is None  # the whole tail is within the budget
    assert select_span(Session(), meter, 0) is None  # an empty surface


def test_the_cut_snaps_toward_the_head_to_a_balanced_boundary(meter: HeuristicMeter) -> None:
    session = Session()
    user(session, "task")
    standalone = user(session, text_of_price(20))
    start_turn(session)
    assistant, results = tool_step(session, n_calls=2, output="o" * 40)
    last = user(session, text_of_price(20))
    # The walk stops on the second tool result: the cut before it splits the step (balance 1),
    # so does the cut before the first result (balance 2); the cut before the assistant holds.
    budget = meter.node_price(session, last) + meter.node_price(session, results[1])
    span = select_span(session, meter, budget)
    assert span is not None
    assert span.seqs == (standalone,)
    cuts = session.surface.cuts()
    at = session.nodes.index
    assert (cuts[at(results[1])], cuts[at(results[0])], cuts[at(assistant)]) == (1, 2, 0)


def test_a_closed_step_is_one_unit(meter: HeuristicMeter) -> None:
    session = Session()
    user(session, "task")
    start_turn(session)
    first, first_results = tool_step(session, n_calls=3)
    second, _ = tool_step(session, n_calls=1)
    span = select_span(session, meter, 0)
    assert span is not None
    assert span.seqs == (first, *first_results)  # the newest unit (the second step) is kept
    assert second not in span.seqs


def test_an_open_step_is_not_split_selection_declines(meter: HeuristicMeter) -> None:
    session = Session()
    user(session, "task")
    start_turn(session)
    tool_step(session, n_calls=2, close=False)  # calls without results: an open step
    assert session.open_step is not None
    assert select_span(session, meter, 0) is None


def test_closed_steps_before_an_open_step_still_compact(meter: HeuristicMeter) -> None:
    session = Session()
    user(session, "task")
    start_turn(session)
    closed, closed_results = tool_step(session, n_calls=1)
    open_assistant, _ = tool_step(session, n_calls=2, close=False)
    span = select_span(session, meter, 0)
    assert span is not None
    assert span.seqs == (closed, *closed_results)
    assert open_assistant not in span.seqs


def test_a_surface_of_one_unit_cannot_be_compacted(meter: HeuristicMeter) -> None:
    session = Session()
    user(session, "task")
    assert select_span(session, meter, 0) is None
    assert select_span(session, meter, 0, keep_first_user=False) is None


# ---------------------------------------------------------------- the task statement


def test_the_first_user_message_is_never_selected(meter: HeuristicMeter) -> None:
    session = Session()
    seqs = five_messages(session)
    task = session.first_user_seq
    span = select_span(session, meter, 0)
    assert span is not None and task not in span.seqs and span.first == 1
    free = select_span(session, meter, 0, keep_first_user=False)
    assert free is not None
    assert free.seqs == (task, *seqs[:4])  # without the guard the head is the task itself


def test_context_before_the_task_does_not_starve_selection(meter: HeuristicMeter) -> None:
    """SWE-agent transcripts put a demonstration before the task: compaction anchors right after
    the task and still compacts the history that follows it."""
    session = Session()
    demo = session.append(
        ContextMessage(
            message=Message(id="demo", role="user", content=(TextBlock("a demonstration"),)),
            surface_op="append",
        )
    ).seq
    task = user(session, "the real task")
    seqs = [user(session, text_of_price(20)) for _ in range(4)]
    span = select_span(session, meter, 0)
    assert span is not None
    assert span.seqs == tuple(seqs[:3])
    assert demo not in span.seqs and task not in span.seqs


def test_when_the_task_is_in_the_retained_tail_only_what_precedes_it_compacts(
    meter: HeuristicMeter,
) -> None:
    session = Session()
    early = [
        session.append(
            ContextMessage(
                message=Message(id=f"c{i}", role="user", content=(TextBlock(text_of_price(20)),)),
                surface_op="append",
            )
        ).seq
        for i in range(3)
    ]
    user(session, "the task, last on the surface")
    span = select_span(session, meter, 0)
    assert span is not None
    assert span.seqs == tuple(early)


# ---------------------------------------------------------------- explicit spans


def test_explicit_span_validation_names_the_rule(meter: HeuristicMeter) -> None:
    session = Session()
    user(session, "task")
    start_turn(session)
    assistant, results = tool_step(session, n_calls=2)
    tail = user(session, "tail")
    with pytest.raises(SpanError, match=r"^compactRegion: start seq 999 not found in surface"):
        span_for(session, 999, tail)
    with pytest.raises(SpanError, match=r"^compactRegion: end seq 999 not found in surface"):
        span_for(session, assistant, 999)
    with pytest.raises(
        SpanError,
        match=rf"^compactRegion: start seq {tail} \(position 4\) is after end seq {assistant} "
        r"\(position 1\) on the surface",
    ):
        span_for(session, tail, assistant)
    with pytest.raises(
        SpanError, match=rf"^compactRegion: start seq {results[1]} is not a balanced boundary"
    ):
        span_for(session, results[1], tail)
    with pytest.raises(SpanError, match=rf"^compactRegion: end seq {assistant} is not a balanced boundary"):
        span_for(session, assistant, assistant)
    with pytest.raises(SpanError, match="includes the session's first user message"):
        span_for(session, session.nodes[0], results[1])
    span = span_for(session, assistant, results[1])
    assert span.seqs == (assistant, *results)
    assert span_for(session, session.nodes[0], tail, keep_first_user=False).first == 0
