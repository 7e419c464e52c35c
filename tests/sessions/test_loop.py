"""The reference agent loop: event order, pre-step hooks, tools, saving, retries, cancellation,
and the deterministic demo model."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import msgspec
import pytest

from compaction.cli.demo import (
    DemoModel,
    DemoWorkspace,
    demo_tools,
    module_path,
    module_test_path,
    run_demo_session,
)
from compaction.errors import EventCompactionError, ScriptExhaustedError
from compaction.sessions import render
from compaction.sessions.blocks import Message, TextBlock, text_of, tool_calls_of, tool_result_of
from compaction.sessions.events import (
    APPEND,
    UNSET_TIME,
    AssistantMessage,
    ContextMessage,
    RequestHeader,
    SessionEvent,
    ToolCall,
    ToolResult,
    TurnEnd,
    UserMessage,
)
from compaction.sessions.invariants import DEFAULT_INVARIANTS
from compaction.sessions.loop import (
    AgentLoop,
    AgentLoopError,
    ModelRequest,
    ModelResponse,
    StepContext,
    ToolFunction,
    ToolOutput,
)
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from compaction.testing import ScriptedModel, ScriptItem, reply, tool_call
from tests.builders import log_types

# ---------------------------------------------------------------- helpers


async def echo(arguments: str) -> ToolOutput:
    return ToolOutput(f"echo {arguments}")


def make_loop(
    session: Session,
    script: list[ScriptItem],
    tools: dict[str, ToolFunction] | None = None,
    **options: object,
) -> tuple[AgentLoop, ScriptedModel]:
    model = ScriptedModel(script)
    loop = AgentLoop(
        session,
        model,
        {"echo": echo} if tools is None else tools,
        provider="scripted",
        model_name="scripted-1",
        system="be brief",
        **options,  # type: ignore[arg-type]
    )
    return loop, model


def two_step_script(prefix: str = "") -> list[ScriptItem]:
    return [
        reply(
            "calling two tools",
            tool_call("echo", {"n": 1}, f"{prefix}c1"),
            tool_call("echo", {"n": 2}, f"{prefix}c2"),
            message_id=f"{prefix}a1",
            chunks=("calling ", "two tools"),
        ),
        reply("done", message_id=f"{prefix}a2"),
    ]


def without_time(event: SessionEvent) -> SessionEvent:
    return msgspec.structs.replace(event, time=UNSET_TIME)


TWO_STEP_TURN = [
    "session/invariants",  # the loop writes a new session under the compact/* bracket invariant
    "user/message",
    "turn/start",
    "request/header",
    "step/start",
    "assistant/chunk",
    "assistant/chunk",
    "assistant/message",
    "tool/call",
    "tool/result",
    "tool/call",
    "tool/result",
    "step/end",
    "step/start",
    "assistant/chunk",
    "assistant/message",
    "step/end",
    "turn/end",
]


# ---------------------------------------------------------------- event order


async def test_two_step_turn_appends_events_in_order() -> None:
    session = Session()
    loop, model = make_loop(session, two_step_script())

    outcome = await loop.run_turn("list the files")

    assert log_types(session) == TWO_STEP_TURN
    assert (outcome.turn, outcome.steps, outcome.reason.kind) == (1, 2, "completed")
    events = list(session.events())
    first = events[7]  # after the marker (seq 0) and the turn's opening
    assert isinstance(first, AssistantMessage)
    assert first.source_event_seqs == (5, 6)
    assert first.message.source.kind == "model"
    for call_seq in (8, 10):
        call, result = events[call_seq], events[call_seq + 1]
        assert isinstance(call, ToolCall) and isinstance(result, ToolResult)
        assert result.source_event_seqs == (call_seq,)
        assert result.message.source.call_id == call.call_id
        block = tool_result_of(result.message)
        assert block is not None and not block.is_error
        assert text_of(block.content) == f"echo {call.arguments}"
    assert len(model.requests) == 2
    assert [m.role for m in model.requests[1].messages] == ["user", "assistant", "user", "user"]
    assert render.pairing_problems(session.derive_messages()) == []


async def test_assistant_message_without_chunks_cites_an_empty_tuple() -> None:
    session = Session()
    loop, _ = make_loop(session, [reply("plain", message_id="a1", chunks=())])

    await loop.run_turn("hi")

    message = session.event(session.last_of("assistant/message") or 0)
    assert isinstance(message, AssistantMessage)
    assert message.source_event_seqs == ()


async def test_request_is_derived_from_the_surface_with_the_envelope() -> None:
    session = Session()
    loop, model = make_loop(session, two_step_script(), max_tokens=512)

    await loop.run_turn("go")

    request = model.requests[1]
    assert (request.provider, request.model, request.system, request.max_tokens) == (
        "scripted",
        "scripted-1",
        "be brief",
        512,
    )
    assert list(request.messages) == session.messages_at(11)


# ---------------------------------------------------------------- pre-step hooks


async def test_pre_step_hooks_are_awaited_serially_once_per_step() -> None:
    session = Session()
    trace: list[tuple[str, str, int, int]] = []

    def recorder(name: str) -> Callable[[StepContext], Awaitable[None]]:
        async def hook(ctx: StepContext) -> None:
            assert ctx.session.open_turn == ctx.turn == 1
            assert ctx.session.open_step is None
            assert isinstance(ctx.header, RequestHeader)
            trace.append((name, "enter", ctx.step, len(ctx.session)))
            await asyncio.sleep(0)  # a yield point: hooks run concurrently would interleave here
            trace.append((name, "exit", ctx.step, len(ctx.session)))

        return hook

    loop, _ = make_loop(session, two_step_script(), pre_step=[recorder("a")])
    loop.add_pre_step(recorder("b"))

    await loop.run_turn("go")

    assert [(n, phase, step) for n, phase, step, _ in trace] == [
        ("a", "enter", 1),
        ("a", "exit", 1),
        ("b", "enter", 1),
        ("b", "exit", 1),
        ("a", "enter", 2),
        ("a", "exit", 2),
        ("b", "enter", 2),
        ("b", "exit", 2),
    ]
    for _, _, _, length in trace:
        # the hook ran after the previous event closed and right before the step opened
        assert session.event(length - 1).TYPE in ("request/header", "step/end")
        assert session.event(length).TYPE == "step/start"


async def test_a_hook_message_lands_outside_the_step_and_in_its_request() -> None:
    session = Session()
    note = Message(id="note-1", role="user", content=(TextBlock("prefer small diffs"),))

    async def steer(ctx: StepContext) -> None:
        if ctx.step == 2:
            ctx.session.append(UserMessage(message=note, surface_op=APPEND))

    loop, model = make_loop(session, two_step_script(), pre_step=[steer])

    await loop.run_turn("go")

    assert log_types(session)[12:15] == ["step/end", "user/message", "step/start"]
    assert note not in model.requests[0].messages
    assert model.requests[1].messages[-1] == note
    assert render.pairing_problems(session.derive_messages()) == []


async def test_a_failing_hook_is_logged_and_the_turn_continues(
    caplog: pytest.LogCaptureFixture,
) -> None:
    session = Session()
    calls: list[int] = []

    async def broken(ctx: StepContext) -> None:
        raise RuntimeError(f"summarizer unreachable at step {ctx.step}")

    async def after(ctx: StepContext) -> None:
        calls.append(ctx.step)

    loop, _ = make_loop(session, two_step_script(), pre_step=[broken, after])

    with caplog.at_level(logging.WARNING, logger="compaction.sessions.loop"):
        outcome = await loop.run_turn("go")

    assert outcome.reason.kind == "completed"
    assert calls == [1, 2]
    warnings = [r.getMessage() for r in caplog.records if r.name == "compaction.sessions.loop"]
    assert warnings == [
        "pre-step hook failed: summarizer unreachable at step 1; continuing the turn",
        "pre-step hook failed: summarizer unreachable at step 2; continuing the turn",
    ]
    assert log_types(session) == TWO_STEP_TURN


# ---------------------------------------------------------------- tools


async def test_tool_errors_and_unknown_tools_become_error_results() -> None:
    async def explode(arguments: str) -> ToolOutput:
        raise ValueError(f"cannot parse {arguments}")

    async def refuse(arguments: str) -> ToolOutput:
        return ToolOutput("permission denied: /etc/shadow", is_error=True)

    session = Session()
    script: list[ScriptItem] = [
        reply(
            "",
            tool_call("explode", "{oops", "c1"),
            tool_call("refuse", {"path": "/etc/shadow"}, "c2"),
            tool_call("nope", {}, "c3"),
            message_id="a1",
        ),
        reply("giving up", message_id="a2"),
    ]
    loop, _ = make_loop(session, script, tools={"explode": explode, "refuse": refuse})

    outcome = await loop.run_turn("try")

    assert outcome.reason.kind == "completed"
    results = [e for e in session.events() if isinstance(e, ToolResult)]
    found = []
    for result in results:
        block = tool_result_of(result.message)
        assert block is not None and block.is_error
        assert result.error is not None
        found.append((block.tool_call_id, result.error.code, text_of(block.content)))
    assert found == [
        ("c1", "TOOL_ERROR", "tool 'explode' raised ValueError: cannot parse {oops"),
        ("c2", "TOOL_ERROR", "permission denied: /etc/shadow"),
        (
            "c3",
            "TOOL_NOT_FOUND",
            "unknown tool 'nope': expected one of the registered tools (explode, refuse)",
        ),
    ]
    assert render.pairing_problems(session.derive_messages()) == []


# ---------------------------------------------------------------- turns and headers


async def test_turns_are_numbered_and_the_header_is_written_on_change() -> None:
    session = Session()
    script = [*two_step_script("t1-"), *two_step_script("t2-"), reply("ok", message_id="t3")]
    loop, _ = make_loop(session, script)

    first = await loop.run_turn("one")
    second = await loop.run_turn(Message(id="p2", role="user", content=(TextBlock("two"),)))
    loop.model_name = "scripted-2"
    third = await loop.run_turn("three")

    assert [first.turn, second.turn, third.turn] == [1, 2, 3]
    headers = [e for e in session.events() if isinstance(e, RequestHeader)]
    assert [(h.model, h.reason) for h in headers] == [
        ("scripted-1", "initial"),
        ("scripted-2", "change"),
    ]
    ends = [e for e in session.events() if isinstance(e, TurnEnd)]
    assert [(e.turn, e.reason.kind) for e in ends] == [(n, "completed") for n in (1, 2, 3)]
    assert session.event(len(TWO_STEP_TURN)).message.id == "p2"  # type: ignore[attr-defined]


async def test_a_new_session_is_written_under_the_bracket_invariant_unless_asked_not_to() -> None:
    session = Session()
    loop, _ = make_loop(session, two_step_script())
    await loop.run_turn("go")
    assert session.invariants == DEFAULT_INVARIANTS and log_types(session)[0] == "session/invariants"
    plain = Session()
    loop, _ = make_loop(plain, two_step_script(), invariants=())
    await loop.run_turn("go")
    assert plain.invariants == () and log_types(plain)[0] == "user/message"
    again, _ = make_loop(plain, [reply("ok", message_id="x")])
    await again.run_turn("more")  # a session with history keeps what it has
    assert plain.invariants == ()


async def test_run_turn_refuses_while_a_turn_is_open() -> None:
    session = Session()
    loop, _ = make_loop(session, [])
    entered, release = asyncio.Event(), asyncio.Event()

    async def blocking(ctx: StepContext) -> None:
        entered.set()
        await release.wait()

    loop.add_pre_step(blocking)
    task = asyncio.create_task(loop.run_turn("first"))
    await asyncio.wait_for(entered.wait(), timeout=5)  # the first turn is open, held in its hook
    with pytest.raises(AgentLoopError, match="expected no open turn, found turn 1 open"):
        await loop.run_turn("second")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_max_steps_ends_the_turn_with_an_error_reason() -> None:
    session = Session()
    script: list[ScriptItem] = [
        reply("again", tool_call("echo", {"i": i}, f"c{i}"), message_id=f"a{i}") for i in range(3)
    ]
    loop, _ = make_loop(session, script, max_steps=2)

    outcome = await loop.run_turn("loop forever")

    assert outcome.steps == 2
    assert (outcome.reason.kind, outcome.reason.message) == ("error", "max steps reached")
    assert log_types(session)[-2:] == ["step/end", "turn/end"]


# ---------------------------------------------------------------- saving


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_each_step_is_saved_and_the_reload_equals_the_live_session(
    backend: str, sqlite_url: str
) -> None:
    url = "memory://" if backend == "memory" else sqlite_url
    with SessionStore.open(url) as store:
        session = store.create()
        saved_at_hook: list[tuple[int, int]] = []

        async def check_saved(ctx: StepContext) -> None:
            stored = len(store.get(session.id)) if store.exists(session.id) else 0
            saved_at_hook.append((stored, len(session)))

        loop, _ = make_loop(
            session,
            [*two_step_script("t1-"), *two_step_script("t2-")],
            store=store,
            pre_step=[check_saved],
        )
        await loop.run_turn("one")
        await loop.run_turn("two")

        assert session.pending == []
        # step 1 of a turn sees nothing of that turn saved yet; step 2 sees step 1 saved
        assert saved_at_hook[1][0] == 13 and saved_at_hook[1][1] == 13
        assert saved_at_hook[3][0] == saved_at_hook[3][1]
        reloaded = store.get(session.id)
        assert list(reloaded.events()) == list(session.events())
        assert reloaded.derive_messages() == session.derive_messages()
        assert reloaded.open_turn is None


async def test_a_model_error_closes_the_turn_saves_and_is_reraised(sqlite_url: str) -> None:
    with SessionStore.open(sqlite_url) as store:
        session = store.create()
        loop, _ = make_loop(session, [RuntimeError("provider returned 503")], store=store)

        with pytest.raises(RuntimeError, match="provider returned 503"):
            await loop.run_turn("go")

        assert log_types(session)[-3:] == ["step/start", "step/end", "turn/end"]
        end = session.event(len(session) - 1)
        assert isinstance(end, TurnEnd)
        assert (end.reason.kind, end.reason.message) == ("error", "provider returned 503")
        assert session.pending == []
        assert len(store.get(session.id)) == len(session)


async def test_an_exhausted_script_is_a_library_error() -> None:
    session = Session()
    loop, _ = make_loop(session, [])

    with pytest.raises(ScriptExhaustedError) as caught:
        await loop.run_turn("go")

    assert isinstance(caught.value, EventCompactionError)
    assert "expected at most 0 calls, got call 1" in str(caught.value)
    assert session.open_turn is None


# ---------------------------------------------------------------- the model-error retry seam


class WindowError(Exception):
    code = "CONTEXT_WINDOW_EXCEEDED"


async def test_a_model_error_hook_can_retry_the_call_within_the_step() -> None:
    session = Session()
    seen: list[tuple[int, int, str]] = []
    hint = Message(id="hint", role="user", content=(TextBlock("older history was summarized"),))

    async def recover(ctx: StepContext, error: Exception) -> bool:
        seen.append((ctx.turn, ctx.step, str(error)))
        ctx.session.append(ContextMessage(message=hint, surface_op=APPEND))
        return isinstance(error, WindowError)

    loop, model = make_loop(
        session,
        [WindowError("prompt is too long"), reply("fits now", message_id="a1")],
        on_model_error=[recover],
    )

    outcome = await loop.run_turn("go")

    assert outcome.reason.kind == "completed" and outcome.steps == 1
    assert seen == [(1, 1, "prompt is too long")]
    assert len(model.requests) == 2
    assert hint not in model.requests[0].messages
    assert model.requests[1].messages[-1] == hint  # re-derived after the hook
    assert log_types(session) == [
        "session/invariants",
        "user/message",
        "turn/start",
        "request/header",
        "step/start",
        "context/message",
        "assistant/chunk",
        "assistant/message",
        "step/end",
        "turn/end",
    ]


async def test_retries_are_bounded_and_the_last_error_closes_the_turn() -> None:
    session = Session()
    attempts: list[str] = []

    async def always(ctx: StepContext, error: Exception) -> bool:
        attempts.append(str(error))
        return True

    loop, model = make_loop(
        session, [WindowError("too long 1"), WindowError("too long 2")], on_model_error=[always]
    )

    with pytest.raises(WindowError, match="too long 2"):
        await loop.run_turn("go")

    assert attempts == ["too long 1"]
    assert len(model.requests) == 2
    end = session.event(len(session) - 1)
    assert isinstance(end, TurnEnd)
    assert (end.reason.kind, end.reason.code) == ("error", "CONTEXT_WINDOW_EXCEEDED")


async def test_a_declining_or_failing_hook_preserves_the_original_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    session = Session()

    async def broken(ctx: StepContext, error: Exception) -> bool:
        raise RuntimeError("compaction target not configured")

    async def decline(ctx: StepContext, error: Exception) -> bool:
        return False

    loop, model = make_loop(session, [WindowError("too long")], on_model_error=[broken, decline])

    with caplog.at_level(logging.WARNING, logger="compaction.sessions.loop"), pytest.raises(WindowError):
        await loop.run_turn("go")

    assert len(model.requests) == 1
    assert "model-error hook failed: compaction target not configured" in caplog.text


# ---------------------------------------------------------------- cancellation


async def test_cancelling_a_tool_closes_the_step_and_the_turn(sqlite_url: str) -> None:
    started = asyncio.Event()

    async def slow(arguments: str) -> ToolOutput:
        started.set()
        await asyncio.Event().wait()
        return ToolOutput("never")

    with SessionStore.open(sqlite_url) as store:
        session = store.create()
        script: list[ScriptItem] = [
            reply("", tool_call("slow", {}, "c1"), tool_call("slow", {}, "c2"), message_id="a1")
        ]
        loop, _ = make_loop(session, script, tools={"slow": slow}, store=store)
        task = asyncio.create_task(loop.run_turn("go"))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

        assert log_types(session)[-5:] == [
            "tool/call",
            "tool/result",
            "tool/result",
            "step/end",
            "turn/end",
        ]
        call_seq = len(session) - 5
        unknown, not_started = session.event(call_seq + 1), session.event(call_seq + 2)
        assert isinstance(unknown, ToolResult) and isinstance(not_started, ToolResult)
        assert unknown.synthesized and not_started.synthesized
        assert unknown.error is not None and unknown.error.code == "TOOL_OUTCOME_UNKNOWN"
        assert unknown.source_event_seqs == (call_seq,)
        assert not_started.error is not None and not_started.error.code == "TOOL_NOT_STARTED"
        end = session.event(len(session) - 1)
        assert isinstance(end, TurnEnd) and end.reason.kind == "aborted"
        assert render.pairing_problems(session.derive_messages()) == []
        assert session.pending == []
        assert list(store.get(session.id).events()) == list(session.events())


async def test_cancelling_the_model_call_closes_the_turn() -> None:
    session = Session()
    entered = asyncio.Event()

    async def hang(request: ModelRequest) -> ModelResponse:
        entered.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    loop, _ = make_loop(session, [hang])
    task = asyncio.create_task(loop.run_turn("go"))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert log_types(session)[-3:] == ["step/start", "step/end", "turn/end"]
    assert session.open_turn is None
    follow, _ = make_loop(session, [reply("back", message_id="a9")])
    assert (await follow.run_turn("again")).turn == 2


# ---------------------------------------------------------------- the demo model


async def test_the_demo_session_is_deterministic_per_seed() -> None:
    first, second, other = Session(), Session(), Session()
    for session, seed in ((first, 7), (second, 7), (other, 8)):
        await run_demo_session(session, turns=2, steps_per_turn=12, seed=seed)

    same = [without_time(e) for e in first.events()]
    assert same == [without_time(e) for e in second.events()]
    assert same != [without_time(e) for e in other.events()]
    ends = [e for e in first.events() if isinstance(e, TurnEnd)]
    assert [(e.turn, e.reason.kind) for e in ends] == [(1, "completed"), (2, "completed")]
    assert first.type_counts["step/start"] == 24
    assert render.pairing_problems(first.derive_messages()) == []


async def test_the_demo_session_is_long_tool_heavy_and_realistic(sqlite_url: str) -> None:
    with SessionStore.open(sqlite_url) as store:
        session = await run_demo_session(store.create(), store, turns=2, steps_per_turn=30)
        assert store.get(session.id).derive_messages() == session.derive_messages()

    results = [e for e in session.events() if isinstance(e, ToolResult)]
    outputs = [text_of(block.content) for r in results if (block := tool_result_of(r.message))]
    assert len(results) >= 60
    assert max(len(o) for o in outputs) <= 3200
    assert sum(len(o) for o in outputs) / len(outputs) >= 500
    text = "\n".join(outputs)
    assert "AssertionError: expected" in text
    assert "ModuleNotFoundError: No module named" in text
    assert "passed in" in text
    assert any(r.error is not None for r in results)  # a stale edit is reported as an error
    calls = [e for e in session.events() if isinstance(e, ToolCall)]
    assert {c.name for c in calls} == {"bash", "read_file", "grep", "edit_file"}
    assert render.pairing_problems(session.derive_messages()) == []


async def test_demo_edits_really_fix_the_failing_tests() -> None:
    workspace = DemoWorkspace(seed=1)
    tools = demo_tools(workspace)
    k, bug = next(iter(sorted(workspace.bugs.items())))
    command = msgspec.json.encode({"command": f"pytest {module_test_path(k)} -q"}).decode()

    before = await tools["bash"](command)
    edit = await tools["edit_file"](
        msgspec.json.encode({"path": module_path(k), "old_string": bug.bad, "new_string": bug.good}).decode()
    )
    after = await tools["bash"](command)

    assert bug.error in before.text and "1 failed, 3 passed" in before.text
    assert not edit.is_error and f"Edited {module_path(k)}" in edit.text
    assert "4 passed" in after.text and "FAILED" not in after.text
    again = await tools["edit_file"](
        msgspec.json.encode({"path": module_path(k), "old_string": bug.bad, "new_string": bug.good}).decode()
    )
    assert again.is_error and "was not found" in again.text


async def test_demo_model_ends_each_turn_after_steps_per_turn_steps() -> None:
    model = DemoModel(seed=2, steps_per_turn=3)
    request = ModelRequest("demo", "demo-coder-1", None, (), ())

    responses = [await model.complete(request) for _ in range(6)]

    has_calls = [bool(tool_calls_of(r.message)) for r in responses]
    assert has_calls == [True, True, False, True, True, False]
    assert all(r.chunks and "".join(r.chunks) == text_of(r.message.content) for r in responses)
