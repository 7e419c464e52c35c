"""The span's handover facts folded by the read-ahead and carried by the snapshot
(:mod:`compaction.handover.facts_fold`): at every cut of every public transcript, and of generated
sessions, the fold gives exactly what the walk of :func:`~compaction.handover.facts.span_facts`
gives; a fold carried part way and advanced gives the same; a process that loads the session from
its snapshot compacts with the fold to the same checkpoint as without it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compaction.handover import facts_fold
from compaction.handover.analysis import SpanAnalysis
from compaction.handover.facts import SpanFacts, span_facts
from compaction.handover.facts_fold import FactsFold, folded_facts
from compaction.handover.readahead import ReadAhead
from compaction.importers import import_path
from compaction.service import BasicCompactService
from compaction.sessions.blocks import (
    Message,
    OpaqueBlock,
    Source,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from compaction.sessions.events import AssistantMessage, StepEnd, StepStart, ToolCall, ToolResult
from compaction.sessions.session import Session, project
from compaction.sessions.store import SessionStore
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.events import CompactSummary
from tests.builders import MODEL, end_turn, start_turn, user
from tests.compaction.test_identifier_fold import cuts, transcript_id, worked
from tests.conftest import PUBLIC_TRANSCRIPTS


def walked(session: Session, shadowed: tuple[int, ...], analysis: SpanAnalysis) -> SpanFacts:
    """The span's facts as the walk finds them (each message read once, through ``analysis``)."""
    messages = [m for m in (project(session.event(seq)) for seq in shadowed) if m is not None]
    with analysis.active():
        return span_facts(messages)


def fold_of(session: Session) -> FactsFold:
    fold = FactsFold.decode(session.readings[facts_fold.READING]())
    assert fold is not None and fold.holds(session)
    return fold


def check_every_cut(session: Session, every: bool = False) -> int:
    """Compare the fold's facts with the walk's at the cuts; returns how many the fold answered."""
    fold, nodes = fold_of(session), session.nodes
    analysis = SpanAnalysis()
    answered = 0
    spots = range(fold.begin + 1, len(nodes) + 1) if every else cuts(fold.begin, len(nodes))
    for cut in spots:
        shadowed = tuple(nodes[fold.begin : cut])
        found = folded_facts(session, shadowed)
        if found is None:
            assert (0 <= fold.halt_at < cut) or not (0 <= fold.first_call_at < cut)
            continue
        assert found == walked(session, shadowed, analysis), cut
        answered += 1
    return answered


@pytest.mark.parametrize("path", PUBLIC_TRANSCRIPTS, ids=transcript_id)
def test_the_fold_equals_the_walk_at_every_cut(path: Path) -> None:
    for item in import_path(path):
        session = item.session
        ReadAhead().observe(session)
        fold = fold_of(session)
        answerable = fold.first_call_at >= 0 and fold.halt_at != fold.first_call_at
        assert check_every_cut(session, every=True) >= 1 or not answerable, path.name


@pytest.mark.parametrize("path", PUBLIC_TRANSCRIPTS, ids=transcript_id)
def test_a_fold_carried_part_way_and_advanced_is_the_fold_read_at_once(path: Path) -> None:
    session = import_path(path)[0].session
    whole = FactsFold.start(session)
    part = FactsFold.start(session)
    assert whole is not None and part is not None
    whole.advance(session)
    part.advance(session, (part.begin + len(session.nodes)) // 2)
    carried = FactsFold.decode(part.encode())
    assert carried is not None
    carried.advance(session)
    assert carried.encode() == whole.encode()


def test_a_span_the_fold_does_not_start_is_walked() -> None:
    session = worked()
    ReadAhead().observe(session)
    nodes = session.nodes
    assert folded_facts(session, tuple(nodes[1:])) is not None
    assert folded_facts(session, tuple(nodes[2:])) is None  # not the fold's first node
    assert folded_facts(session, tuple(nodes[:3])) is None  # the task statement in it


# ---------------------------------------------------------------- generated sessions

TOOLS = ("Bash", "Edit", "Read", "TodoWrite", "TaskCreate", "TaskUpdate")
OUTPUTS = (
    "ok",
    "",
    "exit code 0\nall good",
    "Traceback (most recent call last):\n  File 'x.py'\nValueError: bad value",
    "FAILED tests/test_a.py::test_b - AssertionError",
    "Task #7 created successfully",
    "The file src/a.py has been updated successfully.",
    "The user doesn't want to proceed with this tool use. the user said: try the other file",
    "exit code 2",
)
USER_TEXTS = (
    "Please fix the failing test in src/a.py",
    "Parameter 'command' is expected to be one of [view, create]",
    "<command-name>/review</command-name>",
    "[Request interrupted by user]",
    "",
)
AGENT_TEXTS = ("Let me run the tests now.", "Done.", "", "Next, I'll edit src/b.py.", "reasoning")
REASONING = OpaqueBlock(framework="openai-agents", kind="reasoning", payload="{}", text="thinking  about\nit")
"""An agent text of ``"reasoning"`` is an opaque block (a framework item) before the calls."""


def _arguments(tool: str, key: int) -> str:
    if tool == "TodoWrite":
        return f'{{"todos": [{{"content": "item {key}", "status": "in_progress"}}]}}'
    if tool == "TaskCreate":
        return f'{{"subject": "task {key}"}}'
    if tool == "TaskUpdate":
        return f'{{"taskId": "7", "status": "{"completed" if key % 2 else "in_progress"}"}}'
    if tool == "Bash":
        return f'{{"command": "pytest tests/test_{key}.py"}}'
    return f'{{"file_path": "src/file_{key}.py"}}'


step_shape = st.tuples(
    st.sampled_from(AGENT_TEXTS),
    st.lists(st.tuples(st.sampled_from(TOOLS), st.integers(0, 2), st.sampled_from(OUTPUTS)), max_size=3),
    st.sampled_from(USER_TEXTS),
    st.booleans(),  # results in one message (parallel calls) or one each
)


def generated(shapes: list[tuple[str, list[tuple[str, int, str]], str, bool]]) -> Session:
    """A session of one turn per user text: each shape one step (the agent's text and calls,
    the results in call order or, ``reversed``, the last call answered first), then the user's
    text, if any."""
    session = Session()
    user(session, "the task: keep src/ green")
    turn = start_turn(session)
    for number, (agent_text, tools, user_text, reverse) in enumerate(shapes):
        step = session.structure.next_step
        session.append(StepStart(turn=turn, step=step))
        calls = [
            ToolCallBlock(f"c{number}-{i}", tool, _arguments(tool, key))
            for i, (tool, key, _) in enumerate(tools)
        ]
        text: tuple[TextBlock | OpaqueBlock, ...] = (TextBlock(agent_text),) if agent_text else ()
        if agent_text == "reasoning":
            text = (REASONING,)
        if text or calls:
            session.append(
                AssistantMessage(
                    turn=turn,
                    step=step,
                    message=Message(f"a{number}", "assistant", (*text, *calls), source=MODEL),
                    surface_op="append",
                )
            )
        answers = list(zip(calls, (output for *_, output in tools), strict=True))
        for call, output in reversed(answers) if reverse else answers:
            made = session.append(
                ToolCall(turn=turn, step=step, call_id=call.id, name=call.name, arguments=call.arguments)
            )
            session.append(
                ToolResult(
                    turn=turn,
                    step=step,
                    message=Message(
                        f"r{len(session)}",
                        "user",
                        (ToolResultBlock(call.id, (TextBlock(output),)),),
                        source=Source(kind="tool", call_id=call.id),
                    ),
                    surface_op="append",
                    source_event_seqs=(made.seq,),
                )
            )
        session.append(StepEnd(turn=turn, step=step))
        if user_text:
            end_turn(session)
            user(session, user_text)
            turn = start_turn(session)
    end_turn(session)
    return session


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(step_shape, min_size=1, max_size=12))
def test_the_fold_equals_the_walk_on_generated_sessions(
    shapes: list[tuple[str, list[tuple[str, int, str]], str, bool]],
) -> None:
    session = generated(shapes)
    ReadAhead().observe(session)
    if facts_fold.READING not in session.readings:  # nothing after the task statement to fold
        assert len(session.nodes) == 1
        return
    check_every_cut(session, every=True)


# ---------------------------------------------------------------- a cold compaction


def test_a_cold_compaction_uses_the_fold_and_commits_the_same(tmp_path: Path) -> None:
    summaries: dict[bool, CompactSummary] = {}
    with SessionStore.open(f"sqlite:///{tmp_path / 's.db'}", snapshot_interval=1) as store:
        session = worked()
        ReadAhead().observe(session)
        store.save(session)
        for carried in (True, False):
            loaded = store.get(session.id)
            if not carried:
                loaded.readings.pop(facts_fold.READING)
            service = BasicCompactService(BasicConfig(context_window=2_000))
            asyncio.run(service.compact_to_fit(loaded))
            event = loaded.event(loaded.last_of(CompactSummary.TYPE) or 0)
            assert isinstance(event, CompactSummary)
            summaries[carried] = event
    assert summaries[True].summary == summaries[False].summary
    assert summaries[True].fidelity == summaries[False].fidelity
