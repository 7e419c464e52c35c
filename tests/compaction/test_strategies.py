"""The other operations: tool-result pruning, overflow recovery, checkpoint rebuild."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compaction.audit.checks import audit_events
from compaction.engine.brackets import committed_count
from compaction.engine.meters import HeuristicMeter
from compaction.engine.prune import MARKER, PruneConfig, prune_session
from compaction.errors import BusyError, CompactionError, ContextLengthError
from compaction.importers import import_path
from compaction.service import BasicCompactService
from compaction.sessions.blocks import TextBlock, ToolResultBlock, text_of
from compaction.sessions.events import StepStart, ToolResult
from compaction.sessions.loop import AgentLoop, ModelRequest, ModelResponse, ToolOutput
from compaction.sessions.render import pairing_problems
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from compaction.strategies.checkpoint import (
    CheckpointCompactService,
    PhaseEnd,
    ScratchpadSet,
)
from compaction.strategies.overflow import OverflowRecovery
from compaction.testing import ScriptedModel, reply, tool_call
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.events import CompactEnd, CompactPrune, CompactStart
from tests.builders import end_turn, start_turn, tool_step, user
from tests.conftest import PUBLIC_TRANSCRIPTS

LOW = PruneConfig(threshold_chars=2000, head_chars=800, tail_chars=400)


# ---------------------------------------------------------------- pruning


@pytest.mark.parametrize("path", PUBLIC_TRANSCRIPTS, ids=lambda p: p.name)
def test_pruning_every_public_transcript(path: Path) -> None:
    for imported in import_path(path):
        session = imported.session
        meter = HeuristicMeter()
        before = meter.measure(session).surface_tokens
        report = prune_session(session, meter, LOW)
        for pruned in report.pruned:
            original = session.event(pruned.original_seq)
            rewritten = session.event(pruned.replacement_seq)
            assert isinstance(original, ToolResult) and isinstance(rewritten, ToolResult)
            assert rewritten.message.id == original.message.id
            assert rewritten.message.source.call_id == original.message.source.call_id == pruned.call_id
            block = rewritten.message.content[0]
            assert isinstance(block, ToolResultBlock)
            text = "".join(b.text for b in block.content if isinstance(b, TextBlock))
            assert MARKER in text and len(text) == LOW.head_chars + len(MARKER) + LOW.tail_chars
            assert pruned.original_seq not in session.nodes and pruned.replacement_seq in session.nodes
            record = session.event(pruned.replacement_seq - 1)
            assert isinstance(record, CompactPrune) and record.shadowed_seqs == (pruned.original_seq,)
        assert session.surface.is_balanced()
        assert pairing_problems(session.derive_messages()) == []
        if report.pruned:
            assert meter.measure(session).surface_tokens < before
        audits, log_checks = audit_events(list(session.events()))
        assert all(c.passed for c in log_checks)
        prunes = [a for a in audits if a.strategy == "prune"]
        assert len(prunes) == len(report.pruned)
        assert all(a.passed for a in prunes), [c for a in prunes for c in a.checks if not c.passed]
        assert prune_session(session, meter, LOW).pruned == []


def test_pruning_runs_before_summarization_under_pressure() -> None:
    session = Session()
    user(session, "Read the logs in /var/log/app/ and explain the crash.")
    start_turn(session, window=4000)
    for _ in range(3):
        tool_step(session, 1, output="log line\n" * 2000)
    service = BasicCompactService(BasicConfig(context_window=12000), pruner=PruneConfig())
    assert service.meter.measure(session).total_tokens >= 9600
    import asyncio

    result = asyncio.run(service.compact_if_needed(session))
    assert result is None  # pruning alone got it under the threshold: no summary was paid for
    assert session.type_counts.get("compact/prune") == 3
    assert "compact/start" not in session.type_counts
    assert service.meter.measure(session).total_tokens < 9600


def test_prune_config_is_validated() -> None:
    with pytest.raises(CompactionError, match="unknown key"):
        PruneConfig.from_mapping({"threshold": 1})
    with pytest.raises(CompactionError, match="must be at most thresholdChars"):
        PruneConfig(threshold_chars=100, head_chars=60, tail_chars=10)


# ---------------------------------------------------------------- overflow recovery

WINDOW_MESSAGES = 12


def _tools() -> dict[str, object]:
    async def bash(arguments: str) -> ToolOutput:
        command = json.loads(arguments)["command"]
        return ToolOutput(f"$ {command}\n" + "output line of the build\n" * 60)

    return {"bash": bash}


def _busy_history(session: Session, store: SessionStore) -> None:
    """A first turn of eight tool steps, so later requests are long."""
    script = [
        reply(
            "step",
            tool_call("bash", {"command": f"make target_{i}"}, f"call-{i}"),
            message_id=f"m{i}",
        )
        for i in range(8)
    ] + [reply("built everything", message_id="m-done")]
    loop = AgentLoop(
        session,
        ScriptedModel(script),
        _tools(),
        store=store,  # type: ignore[arg-type]
        provider="scripted",
        model_name="scripted-1",
        system="You build things.",
        context_window=20000,
    )
    import asyncio

    asyncio.run(loop.run_turn("Build every target in the Makefile and report failures."))


def _overflowing_model(fail_always: bool) -> tuple[ScriptedModel, list[ContextLengthError]]:
    raised: list[ContextLengthError] = []

    def answer(request: ModelRequest) -> ModelResponse:
        if fail_always or len(request.messages) > WINDOW_MESSAGES:
            error = ContextLengthError(
                f"the request exceeds the available context size ({len(request.messages)} messages)"
            )
            raised.append(error)
            raise error
        return reply("all targets built", message_id=f"final-{len(raised)}")

    return ScriptedModel([answer] * 6), raised


def _overflow_loop(session: Session, store: SessionStore, model: ScriptedModel, retries: int) -> AgentLoop:
    service = BasicCompactService(BasicConfig(context_window=20000, max_overflow_retries=retries))
    return AgentLoop(
        session,
        model,
        _tools(),
        store=store,  # type: ignore[arg-type]
        provider="scripted",
        model_name="scripted-1",
        system="You build things.",
        context_window=20000,
        on_model_error=[OverflowRecovery(service, max_overflow_retries=retries)],
        max_model_retries=retries,
    )


def test_overflow_recovery_compacts_and_retries_in_the_same_step() -> None:
    import asyncio

    store = SessionStore.open("memory://")
    session = store.create()
    _busy_history(session, store)
    model, raised = _overflowing_model(fail_always=False)
    loop = _overflow_loop(session, store, model, retries=1)
    outcome = asyncio.run(loop.run_turn("Now summarize what failed."))
    assert outcome.reason.kind == "completed"
    assert len(raised) == 1 and len(model.requests) == 2
    assert len(model.requests[1].messages) < len(model.requests[0].messages)
    turn_events = list(session.events(session.last_of("turn/start") or 0))
    steps = [e for e in turn_events if isinstance(e, StepStart)]
    assert len(steps) == 1  # the retry happened inside the same step
    starts = [e for e in turn_events if isinstance(e, CompactStart)]
    ends = [e for e in turn_events if isinstance(e, CompactEnd)]
    assert len(starts) == len(ends) == 1 and ends[0].error is None
    assert steps[0].seq < starts[0].seq  # the bracket sits inside the step
    assert pairing_problems(session.derive_messages()) == []
    assert store.get(session.id).nodes == session.nodes


def test_overflow_that_keeps_failing_surfaces_the_original_error() -> None:
    import asyncio

    store = SessionStore.open("memory://")
    session = store.create()
    _busy_history(session, store)
    model, raised = _overflowing_model(fail_always=True)
    loop = _overflow_loop(session, store, model, retries=1)
    with pytest.raises(ContextLengthError) as caught:
        asyncio.run(loop.run_turn("Now summarize what failed."))
    assert caught.value is raised[-1]
    assert len(raised) == 2  # the first call, then one retry after a real compaction
    assert session.open_turn is None
    last_end = session.event(session.last_of("turn/end") or 0)
    assert last_end.reason.kind == "error"


def test_overflow_without_a_context_length_error_is_not_handled() -> None:
    import asyncio

    from compaction.sessions.loop import StepContext

    session = Session()
    recovery = OverflowRecovery(BasicCompactService())
    context = StepContext(session=session, store=None, turn=1, step=1, header=None, loop=None)  # type: ignore[arg-type]
    assert asyncio.run(recovery(context, RuntimeError("boom"))) is False


class _ShrinkingService(BasicCompactService):
    """Counts overflow compactions; each one advances the replace generation (as a real one does)."""

    calls = 0

    async def compact_if_needed(self, session, *, store=None, trigger="pressure"):  # type: ignore[no-untyped-def]
        self.calls += 1
        session.surface.generation += 1


def _overflow_context(session: Session, turn: int) -> object:
    from compaction.sessions.loop import StepContext

    return StepContext(session=session, store=None, turn=turn, step=1, header=None, loop=None)  # type: ignore[arg-type]


def test_overflow_retries_default_to_the_service_config() -> None:
    import asyncio

    session = Session()
    overflow = ContextLengthError("prompt is too long")
    disabled = _ShrinkingService(BasicConfig(max_overflow_retries=0))
    assert asyncio.run(OverflowRecovery(disabled)(_overflow_context(session, 1), overflow)) is False  # type: ignore[arg-type]
    assert disabled.calls == 0
    twice = _ShrinkingService(BasicConfig(max_overflow_retries=2))
    recovery = OverflowRecovery(twice)
    outcomes = [asyncio.run(recovery(_overflow_context(session, 1), overflow)) for _ in range(3)]  # type: ignore[arg-type]
    assert outcomes == [True, True, False] and twice.calls == 2


def test_the_overflow_counter_resets_when_a_new_turn_starts() -> None:
    """A turn that exhausted its retries must not leave every later turn without recovery."""
    import asyncio

    session = Session()
    overflow = ContextLengthError("prompt is too long")
    recovery = OverflowRecovery(_ShrinkingService(BasicConfig()))
    assert asyncio.run(recovery(_overflow_context(session, 1), overflow)) is True  # type: ignore[arg-type]
    assert asyncio.run(recovery(_overflow_context(session, 1), overflow)) is False  # type: ignore[arg-type]
    assert asyncio.run(recovery(_overflow_context(session, 2), overflow)) is True  # type: ignore[arg-type]


# ---------------------------------------------------------------- checkpoint rebuild

REQUEST = "Customer reports order 4921 arrived damaged. Decide the credit under the current policy."


def _phase(
    session: Session, name: str, steps: int, values: list[tuple[str, object, str]], conclusion: str
) -> None:
    for _ in range(steps):
        tool_step(session, 2, output="policy chunk c-88xx: clause text " * 40)
    for key, value, source in values:
        session.append(ScratchpadSet(key=key, value=value, source=source))
    session.append(PhaseEnd(name=name, conclusion=conclusion))


def test_phase_workflow_rebuilds_the_context_at_each_boundary() -> None:
    import asyncio

    store = SessionStore.open("memory://")
    session = store.create()
    user(session, REQUEST)
    start_turn(session, window=100_000)
    service = CheckpointCompactService()
    _phase(
        session,
        "investigate",
        4,
        [
            ("order_id", "4921", "tool:c-order"),
            ("policy", {"id": "c-8812", "version": 7}, "tool:c-policy"),
        ],
        "Policy v7 applies (chunk c-8812); the damage is covered.",
    )
    store.save(session)
    first = asyncio.run(service.compact_if_needed(session, store=store))
    assert first is not None
    _phase(
        session,
        "compute-credit",
        3,
        [("credit_cents", 25000, "tool:c-credit"), ("goodwill_cents", 500, "")],
        "Credit computed: 25000 cents; approval needed.",
    )
    second = asyncio.run(service.compact_if_needed(session, store=store))
    assert second is not None
    messages = session.derive_messages()
    assert len(messages) == 2
    assert messages[0].content == (TextBlock(REQUEST),)  # the request stays verbatim, first
    rebuilt = text_of(messages[1].content)
    for expected in (
        "order_id: 4921 (via tool:c-order)",
        '"id": "c-8812"',
        "credit_cents: 25000 (via tool:c-credit)",
        "[investigate] Policy v7 applies",
        "[compute-credit] Credit computed: 25000 cents",
    ):
        assert expected in rebuilt
    flagged = [line for line in rebuilt.splitlines() if "goodwill_cents" in line]
    assert flagged and "UNVERIFIED" in flagged[0]
    assert all("UNVERIFIED" not in line for line in rebuilt.splitlines() if "credit_cents" in line)
    assert committed_count(session) == 2
    audits, log_checks = audit_events(list(store.get(session.id).events()))
    assert all(c.passed for c in log_checks)
    assert [a.strategy for a in audits] == ["checkpoint", "checkpoint"]
    assert all(a.passed for a in audits), [c for a in audits for c in a.checks if not c.passed]


def test_checkpoint_refuses_mid_step_and_without_a_scratchpad() -> None:
    import asyncio

    session = Session()
    user(session, REQUEST)
    start_turn(session)
    tool_step(session, 1)
    service = CheckpointCompactService()
    with pytest.raises(CompactionError, match="needs a typed scratchpad"):
        asyncio.run(service.compact_now(session))
    session.append(ScratchpadSet(key="order_id", value="4921", source="tool:x"))
    tool_step(session, 1, close=False)
    with pytest.raises(BusyError, match="never runs mid-step"):
        asyncio.run(service.compact_now(session))
    assert "compact/start" not in session.type_counts


def test_checkpoint_waits_for_a_boundary() -> None:
    import asyncio

    session = Session()
    user(session, REQUEST)
    start_turn(session)
    tool_step(session, 2, output="x " * 500)
    session.append(ScratchpadSet(key="order_id", value="4921", source="tool:x"))
    tool_step(session, 1)
    assert asyncio.run(CheckpointCompactService().compact_if_needed(session)) is None
    end_turn(session)
    assert "compact/start" not in session.type_counts
