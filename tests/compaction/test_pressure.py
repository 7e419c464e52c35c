"""Automatic compaction: the pressure check, head anchoring and the
merge of a prior checkpoint, convergence, the task statement kept structurally, and a runaway turn
compacted by the loop's pre-step hook."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from compaction.engine.meters import HeuristicMeter
from compaction.errors import CompactionConfigError, ConvergenceError, SummarizerError
from compaction.handover.repeats import occurs
from compaction.service import BasicCompactService
from compaction.sessions.blocks import TextBlock
from compaction.sessions.events import StepEnd, StepStart
from compaction.sessions.loop import AgentLoop, ToolOutput
from compaction.sessions.session import Session
from compaction.summarizers.template import TemplateSummarizer
from compaction.testing import ScriptedModel, reply, tool_call
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.contract import CompactionResult
from compaction.vocabulary.events import CompactEnd, CompactStart
from tests.builders import end_turn, log_types, start_turn, tool_step, user
from tests.compaction.test_support import (
    FailingSummarizer,
    RecordingTemplateSummarizer,
    ScriptedSummarizer,
    assert_committed,
    bracket,
    checkpoints_on_surface,
    committed_brackets,
    text_of_price,
)

RELAXED = {"require_sections": False, "min_identifier_ratio": 0.0, "completion": "off"}
OUTPUT = "Traceback (most recent call last):\n" + '  File "src/app/core.py", line 7\n' * 12


def task_session(window: int) -> Session:
    session = Session()
    user(session, "Fix the failing tests in src/app/ and keep `pytest -q` green.")
    start_turn(session, window=window)
    return session


async def pressure_steps(
    session: Session, service: BasicCompactService, steps: int
) -> list[CompactionResult]:
    """Run ``steps`` tool steps, checking pressure before each, as the pre-step hook does; every
    compaction is checked right after it commits."""
    results = []
    task = session.derive_messages()[0] if service.config.keep_first_user_message else None
    for _ in range(steps):
        result = await service.compact_if_needed(session)
        if result is not None:
            assert_committed(session, result, task)
            results.append(result)
        tool_step(session, n_calls=1, output=OUTPUT)
    return results


async def test_below_the_threshold_nothing_is_written() -> None:
    session = task_session(window=100_000)
    tool_step(session, n_calls=3, output=OUTPUT)
    length = len(session)
    assert await BasicCompactService().compact_if_needed(session) is None
    assert len(session) == length


async def test_the_threshold_is_inclusive() -> None:
    session = task_session(window=10_000)
    total = HeuristicMeter().measure(session).total_tokens
    just_below = BasicCompactService(BasicConfig(context_window=total * 10 // 8 + 2))
    assert just_below.config.budget(total * 10 // 8 + 2)[0] > total
    assert await just_below.compact_if_needed(session) is None


async def test_no_window_is_a_configuration_error() -> None:
    session = Session()
    user(session, "task")
    start_turn(session, window=None)
    with pytest.raises(CompactionConfigError, match="no context window known for test/test-model"):
        await BasicCompactService().compact_if_needed(session)


async def test_no_request_header_means_no_pressure() -> None:
    """Nothing has been routed yet, so there is nothing to compact (as the reference)."""
    session = Session()
    user(session, "task " * 5000)
    length = len(session)
    assert await BasicCompactService().compact_if_needed(session) is None
    assert len(session) == length


async def test_two_automatic_compactions_leave_one_checkpoint_after_the_task() -> None:
    session = task_session(window=1500)
    task_seq = session.first_user_seq
    service = BasicCompactService(summarizer=TemplateSummarizer())
    results = await pressure_steps(session, service, 40)
    assert len(results) >= 2
    first, second = results[0], results[1]
    # head anchoring: the second compaction starts at the first checkpoint and merges it
    assert second.shadowed_seqs[0] == first.replacement_seq
    assert session.nodes[0] == task_seq
    assert checkpoints_on_surface(session) == [results[-1].replacement_seq]
    assert session.nodes[1] == results[-1].replacement_seq
    # the merged summary carries facts of the first span (the path, once: in the command that
    # read it, which the checkpoint quotes whole)
    first_text = bracket(session, first)[1].summary[0].text
    second_text = bracket(session, second)[1].summary[0].text
    assert occurs("src/mod_1_0.py", first_text) and occurs("src/mod_1_0.py", second_text)
    assert "cat src/mod_1_0.py" in second_text


async def test_the_merged_summary_keeps_one_current_state() -> None:
    session = task_session(window=1500)
    service = BasicCompactService(summarizer=TemplateSummarizer())
    results = await pressure_steps(session, service, 40)
    text = bracket(session, results[-1])[1].summary[0].text
    next_step = text.split("## Next Step", 1)[1].split("##", 1)[0]
    assert next_step.count("\n- ") == 1, next_step  # stale next steps are not accumulated
    concepts = text.split("## Key Technical Concepts", 1)[1].split("##", 1)[0]
    assert concepts.count("Tools used") == 1


async def test_convergence_failure_names_the_attempts_and_the_threshold() -> None:
    """A huge retained unit cannot be compacted: two attempts commit (the second re-summarizes the
    first checkpoint) and the service reports that it is still above the threshold."""
    session = task_session(window=1000)  # threshold 800, retain 160
    user(session, text_of_price(100))
    user(session, text_of_price(100))
    huge = user(session, text_of_price(900))
    meter = HeuristicMeter()
    header_and_task = meter.header_tokens(session) + meter.node_price(session, session.nodes[0])
    summarizer = ScriptedSummarizer("checkpoint", "stub")
    service = BasicCompactService(BasicConfig(**RELAXED), summarizer=summarizer)  # type: ignore[arg-type]
    expected = header_and_task + 103 + 900
    with pytest.raises(ConvergenceError) as caught:
        await service.compact_if_needed(session)
    assert str(caught.value) == (
        f"compaction still above threshold after 2 compaction attempts ({expected} estimated "
        f"tokens >= threshold 800) in session {session.id}"
    )
    assert committed_brackets(session) == 2
    assert session.nodes[-1] == huge
    ends = [e for e in session.events() if isinstance(e, CompactEnd)]
    summaries = [session.event(e.seq - 2) for e in ends]
    assert summaries[1].shadowed_seqs == (summaries[0].seq + 1,)  # type: ignore[attr-defined]
    assert summaries[1].shadowed_token_count == 105  # type: ignore[attr-defined]


async def test_retries_are_configurable() -> None:
    session = task_session(window=1000)
    user(session, text_of_price(100))
    user(session, text_of_price(100))
    user(session, text_of_price(900))
    config = BasicConfig(compaction_retries=0, **RELAXED)  # type: ignore[arg-type]
    service = BasicCompactService(config, summarizer=ScriptedSummarizer("checkpoint"))
    with pytest.raises(ConvergenceError, match=r"after 1 compaction attempts"):
        await service.compact_if_needed(session)
    assert committed_brackets(session) == 1


# ---------------------------------------------------------------- the task statement


async def test_the_task_statement_is_never_shadowed_and_stays_first() -> None:
    session = task_session(window=1500)
    task_seq = session.first_user_seq
    task = session.derive_messages()[0]
    recording = RecordingTemplateSummarizer()
    results = await pressure_steps(session, BasicCompactService(summarizer=recording), 40)
    assert len(results) >= 2
    for result in results:
        assert task_seq not in result.shadowed_seqs
    assert session.nodes[0] == task_seq
    assert all(request.messages[0] == task for request in recording.requests)  # the summarizer still sees it


async def test_without_the_guard_the_task_statement_can_be_shadowed() -> None:
    session = task_session(window=1500)
    task_seq = session.first_user_seq
    config = BasicConfig(keep_first_user_message=False)
    results = await pressure_steps(session, BasicCompactService(config), 40)
    assert results and task_seq in results[0].shadowed_seqs
    assert task_seq not in session.nodes
    assert session.nodes[0] == results[-1].replacement_seq


# ---------------------------------------------------------------- the loop seam


async def noisy(arguments: str) -> ToolOutput:
    path = json.loads(arguments)["path"]
    return ToolOutput(f"contents of {path}\n" + "def handler(event):\n    return event\n" * 30)


def runaway_script(steps: int) -> list[object]:
    script: list[object] = [
        reply(
            f"Reading module {n}.",
            tool_call("read_file", {"path": f"src/app/module_{n}.py"}, f"call-{n}"),
            message_id=f"m{n}",
        )
        for n in range(1, steps + 1)
    ]
    script.append(reply("All modules read; the bug is in module 3.", message_id="final"))
    return script


def runaway_loop(
    session: Session, steps: int, service: BasicCompactService, *, window: int = 1200, **options: Any
) -> tuple[AgentLoop, ScriptedModel]:
    """The scripted agent reading ``steps`` noisy modules in one turn, ``service`` before each step."""
    model = ScriptedModel(runaway_script(steps))  # type: ignore[arg-type]
    loop = AgentLoop(
        session,
        model,
        {"read_file": noisy},
        provider="scripted",
        model_name="scripted-1",
        context_window=window,
        pre_step=[service.pre_step],
        **options,
    )
    return loop, model


async def test_a_runaway_turn_compacts_its_own_early_closed_steps() -> None:
    session = Session()
    service = BasicCompactService(summarizer=TemplateSummarizer())
    loop, model = runaway_loop(
        session, 20, service, window=2500, system="You are a careful agent.", max_steps=30
    )
    outcome = await loop.run_turn("Read every module under src/app/ and find the bug.")
    assert outcome.reason.kind == "completed" and outcome.steps == 21
    starts = [e for e in session.events() if isinstance(e, CompactStart)]
    assert len(starts) >= 2
    assert committed_brackets(session) == len(starts)
    types = log_types(session)
    for start in starts:
        assert start.turn == 1  # owned by the one open turn
        assert types[start.seq - 1] == "step/end"  # between steps: after a step closed ...
        end = next(e for e in session.events(start.seq) if isinstance(e, CompactEnd))
        assert types[end.seq + 1] == "step/start"  # ... and before the next one opened
    assert session.open_turn is None and session.surface.is_balanced()
    # the last request the model saw: the task, one checkpoint, then the recent steps verbatim
    last = model.requests[-1].messages
    assert last[0].content == (TextBlock("Read every module under src/app/ and find the bug."),)
    assert last[1].source.plugin == "compact"
    assert all(m.source.plugin != "compact" for m in last[2:])
    ids = [m.id for m in last]
    assert "m1" not in ids and "m20" in ids
    steps_in_log = [e for e in session.events() if isinstance(e, StepStart)]
    assert len(steps_in_log) == 21 and len([e for e in session.events() if isinstance(e, StepEnd)]) == 21


async def test_the_pre_step_hook_contains_failures_and_the_turn_continues(
    caplog: pytest.LogCaptureFixture,
) -> None:
    session = Session()
    failing = BasicCompactService(summarizer=FailingSummarizer(SummarizerError("model is down")))
    loop, _ = runaway_loop(session, 6, failing)
    with caplog.at_level(logging.WARNING, logger="compaction"):
        outcome = await loop.run_turn("Read the modules.")
    assert outcome.reason.kind == "completed"
    assert "step compaction failed: model is down; continuing the turn" in caplog.text
    ends = [e for e in session.events() if isinstance(e, CompactEnd)]
    assert ends and all(e.error == "model is down" for e in ends)
    assert checkpoints_on_surface(session) == []


async def test_auto_false_registers_no_automatic_compaction() -> None:
    session = Session()
    loop, _ = runaway_loop(session, 6, BasicCompactService(BasicConfig(auto=False)))
    await loop.run_turn("Read the modules.")
    assert session.last_of("compact/start") is None


async def test_compaction_to_the_threshold_stops_at_a_lone_checkpoint() -> None:
    """Offline (the CLI's ``compact``): after one compaction only the checkpoint is selectable, the
    huge newest unit stays above the threshold; the service stops instead of failing on a summary
    of a summary, and reports the compaction it committed."""
    session = task_session(window=1000)
    for _ in range(4):
        tool_step(session, n_calls=1, output=OUTPUT)
    user(session, text_of_price(900))
    end_turn(session)
    service = BasicCompactService(BasicConfig(context_window=1000))
    results = await service.compact_to_threshold(session)
    assert len(results) == 1
    assert_committed(session, results[0], session.derive_messages()[0])
    assert session.last_of("compact/end") == results[0].end_seq  # no failed second bracket
    assert HeuristicMeter().measure(session).total_tokens >= 800


async def test_an_open_tail_is_not_compacted_even_above_the_threshold() -> None:
    """The only content after the task is an open step whose calls have no results yet: it cannot
    be split, so selection declines and nothing is written."""
    session = task_session(window=1000)
    tool_step(session, n_calls=3, text=text_of_price(900), close=False)
    service = BasicCompactService(BasicConfig(context_window=1000))
    assert HeuristicMeter().measure(session).total_tokens >= 800
    length = len(session)
    assert await service.compact_if_needed(session) is None
    assert len(session) == length
