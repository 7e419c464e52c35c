"""``/compact`` in the agent loop: the one-line answers, the focus, the six failure texts, the log
(``command/run``, the compaction's records carrying the command id, ``command/done``) and the
audit's listing of who asked."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from compaction.audit.report import audit_session
from compaction.engine.lock import FAILURE_DIR_VARIABLE, new_lease
from compaction.errors import StoreError, SummarizerError
from compaction.service import BasicCompactService
from compaction.sessions.blocks import Message, TextBlock
from compaction.sessions.commands import CommandResult
from compaction.sessions.events import CommandDone, CommandRun, Replace, SessionEvent, UserMessage
from compaction.sessions.invariants import DEFAULT_INVARIANTS
from compaction.sessions.loop import AgentLoop, ToolOutput
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from compaction.summarizers.template import TemplateSummarizer
from compaction.testing import ScriptedModel, reply, tool_call
from compaction.vocabulary.command import FAILURES, NOTHING, USAGE, compact_command, handle_compact
from compaction.vocabulary.contract import CompactService
from compaction.vocabulary.events import CompactEnd, CompactStart, CompactSummary, Lease
from compaction.vocabulary.instruction import FOCUS_LEAD
from compaction.vocabulary.summarizer import SummaryRequest
from tests.compaction.test_support import FailingSummarizer, GatedSummarizer, ScriptedSummarizer, sectioned


class RefusingStore(SessionStore):
    """A real in-memory store that refuses (StoreError) the saves ``refuse`` picks."""

    refuse: Callable[[list[SessionEvent]], bool] = staticmethod(lambda pending: False)  # type: ignore[assignment]

    def save(self, session: Session) -> int:
        if self.refuse(session.pending):
            raise StoreError(f"session {session.id}: refused by the test store")
        return super().save(session)


async def read(arguments: str) -> ToolOutput:
    return ToolOutput("contents of the module: " + "x" * 600)


def script(turns: int) -> list[object]:
    items: list[object] = []
    for n in range(turns):
        items.append(
            reply(f"reading {n}", tool_call("read", {"path": f"m{n}.py"}, f"c{n}"), message_id=f"a{n}")
        )
        items.append(reply(f"read module {n}", message_id=f"b{n}"))
    return items


def make_loop(store: SessionStore, service: CompactService, turns: int = 3, **options: bool) -> AgentLoop:
    session = store.create(invariants=DEFAULT_INVARIANTS)
    return AgentLoop(
        session,
        ScriptedModel(script(turns)),  # type: ignore[arg-type]
        {"read": read},
        store=store,
        provider="scripted",
        model_name="scripted-1",
        context_window=100_000,
        commands={"compact": compact_command(service, **options)},
    )


async def worked(loop: AgentLoop, turns: int = 3) -> None:
    for n in range(turns):
        await loop.submit(f"read module {n}")


def the_run(session: Session) -> tuple[CommandRun, CommandDone]:
    runs = [e for e in session.events() if isinstance(e, CommandRun)]
    dones = [e for e in session.events() if isinstance(e, CommandDone)]
    assert len(runs) == len(dones) == 1 and runs[0].command_id == dones[0].command_id
    assert runs[0].seq < dones[0].seq
    return runs[0], dones[0]


@pytest.fixture
def store() -> SessionStore:
    return RefusingStore.open("memory://")


async def test_compact_compacts_and_the_log_brackets_it_with_the_command(store: SessionStore) -> None:
    loop = make_loop(store, BasicCompactService(summarizer=TemplateSummarizer()))
    await worked(loop)
    model_calls = len(loop.model.requests)  # type: ignore[attr-defined]
    result = await loop.submit("/compact")
    assert isinstance(result, CommandResult) and result.kind == "success"
    session = loop.session
    summary = session.event(session.last_of(CompactSummary.TYPE) or -1)
    assert isinstance(summary, CompactSummary)
    expected = (
        f"Compacted {len(summary.shadowed_seqs)} history items (~{summary.shadowed_token_count} tokens)."
    )
    assert result.text == expected and result.source_event_seq == summary.seq
    run, done = the_run(session)
    assert (run.name, run.args, run.source) == ("compact", "", "user")
    assert (done.kind, done.text, done.source_event_seq) == ("success", expected, summary.seq)
    between = list(session.events(run.seq + 1, done.seq))
    assert [e.TYPE for e in between] == ["compact/start", "compact/summary", "user/message", "compact/end"]
    for event in between:
        command = (
            event.message.source.source_command_id
            if isinstance(event, UserMessage)
            else event.source_command_id
        )  # type: ignore[attr-defined]
        assert command == run.command_id
    assert len(loop.model.requests) == model_calls  # type: ignore[attr-defined]  # no model step
    reloaded = store.get(session.id, use_snapshots=False)
    assert reloaded.nodes == session.nodes
    report = audit_session(store, session.id)
    assert [c.command for c in report.compactions] == [f"/compact (command {run.command_id})"]
    assert all(c.passed for c in report.log_checks), report.log_checks


async def test_nothing_to_compact_answers_so_and_writes_no_compaction(store: SessionStore) -> None:
    loop = make_loop(store, BasicCompactService(summarizer=TemplateSummarizer()))
    result = await loop.submit("/compact")
    assert result == CommandResult("success", NOTHING)
    assert loop.session.last_of(CompactStart.TYPE) is None
    the_run(loop.session)


async def test_arguments_are_refused_without_custom_instructions(store: SessionStore) -> None:
    loop = make_loop(store, BasicCompactService(summarizer=TemplateSummarizer()))
    await worked(loop)
    result = await loop.submit("/compact keep the file names")
    assert result == CommandResult("error", USAGE) and USAGE == "Usage: /compact (no arguments)"
    assert loop.session.last_of(CompactStart.TYPE) is None
    assert the_run(loop.session)[0].args == "keep the file names"


async def test_with_custom_instructions_the_argument_is_the_focus_recorded_on_the_compaction(
    store: SessionStore,
) -> None:
    summarizer = ScriptedSummarizer(sectioned())
    loop = make_loop(store, BasicCompactService(summarizer=summarizer), custom_instructions=True)
    await worked(loop)
    result = await loop.submit("/compact keep the file names")
    assert isinstance(result, CommandResult) and result.kind == "success", result
    start = loop.session.event(loop.session.last_of(CompactStart.TYPE) or -1)
    assert isinstance(start, CompactStart) and start.focus == "keep the file names"
    assert summarizer.requests[-1].instruction.endswith(f"{FOCUS_LEAD}\nkeep the file names")


async def test_busy_when_a_live_compaction_holds_the_lock(store: SessionStore) -> None:
    loop = make_loop(store, BasicCompactService(summarizer=TemplateSummarizer()))
    await worked(loop)
    lease: Lease = new_lease(60)
    loop.session.append(CompactStart(compaction_id="other", turn=None, lease=lease))
    result = await loop.submit("/compact")
    assert result == CommandResult("error", FAILURES["busy"])


async def test_a_summarizer_failure_answers_summary_and_closes_the_bracket(store: SessionStore) -> None:
    failing = FailingSummarizer(SummarizerError("model down"))
    loop = make_loop(store, BasicCompactService(summarizer=failing))
    await worked(loop)
    result = await loop.submit("/compact")
    assert result == CommandResult("error", FAILURES["summary"])
    end = loop.session.event(loop.session.last_of(CompactEnd.TYPE) or -1)
    assert (
        isinstance(end, CompactEnd)
        and end.error
        and end.source_command_id == the_run(loop.session)[0].command_id
    )


async def test_history_changed_during_the_summary_answers_changed(store: SessionStore) -> None:
    loop = make_loop(store, BasicCompactService(summarizer=ScriptedSummarizer(sectioned())))
    await worked(loop)
    session = loop.session
    target = session.nodes[1]

    def rewrite(request: SummaryRequest) -> None:
        message = Message(id="rewritten", role="user", content=(TextBlock("edited"),))
        session.append(
            UserMessage(message=message, surface_op=Replace(target, target), source_event_seqs=(target,))
        )

    loop.commands["compact"] = compact_command(
        BasicCompactService(summarizer=ScriptedSummarizer(sectioned(), on_summarize=rewrite))
    )
    result = await loop.submit("/compact")
    assert result == CommandResult("error", FAILURES["changed"])


async def test_a_refused_commit_answers_commit(store: SessionStore) -> None:
    loop = make_loop(store, BasicCompactService(summarizer=TemplateSummarizer()))
    await worked(loop)
    assert isinstance(store, RefusingStore)
    store.refuse = lambda pending: any(isinstance(e, CompactSummary) for e in pending)  # type: ignore[method-assign]
    result = await loop.submit("/compact")
    assert result == CommandResult("error", FAILURES["commit"])


async def test_a_store_that_cannot_save_the_start_answers_persistence(store: SessionStore) -> None:
    loop = make_loop(store, BasicCompactService(summarizer=TemplateSummarizer()))
    await worked(loop)
    assert isinstance(store, RefusingStore)
    store.refuse = lambda pending: any(isinstance(e, CompactStart) for e in pending)  # type: ignore[method-assign]
    result = await loop.submit("/compact")
    assert result == CommandResult("error", FAILURES["persistence"])


async def test_cancellation_records_the_text_and_leaves_an_inert_closed_bracket(store: SessionStore) -> None:
    gated = GatedSummarizer(sectioned())
    loop = make_loop(store, BasicCompactService(summarizer=gated))
    await worked(loop)
    task = asyncio.create_task(loop.submit("/compact"))
    await gated.entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    session = loop.session
    _, done = the_run(session)
    assert (done.kind, done.text) == ("error", FAILURES["cancelled"])
    end = session.event(session.last_of(CompactEnd.TYPE) or -1)
    assert isinstance(end, CompactEnd) and end.error and end.error.startswith("cancelled")
    reloaded = store.get(session.id, use_snapshots=False)
    assert reloaded.nodes == session.nodes  # the surface is untouched and the log still loads


async def test_handle_compact_is_the_one_call_for_an_adapter(store: SessionStore) -> None:
    loop = make_loop(store, BasicCompactService(summarizer=TemplateSummarizer()))
    await worked(loop)
    service = BasicCompactService(summarizer=TemplateSummarizer())
    assert await handle_compact(service, loop.session, store, "what next?") is None
    result = await handle_compact(service, loop.session, store, "  /compact ")
    assert result is not None and result.text.startswith("Compacted ")


async def test_a_cancelled_command_whose_close_failed_is_taken_over_under_its_command(
    store: SessionStore, tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FAILURE_DIR_VARIABLE, str(tmp_path))
    gated = GatedSummarizer(sectioned())
    loop = make_loop(store, BasicCompactService(summarizer=gated))
    await worked(loop)
    assert isinstance(store, RefusingStore)
    store.refuse = lambda pending: any(isinstance(e, CompactEnd) for e in pending)  # type: ignore[method-assign]
    task = asyncio.create_task(loop.submit("/compact"))
    await gated.entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    first = loop.session.event(loop.session.last_of(CompactStart.TYPE) or -1)
    assert isinstance(first, CompactStart) and first.source_command_id is not None
    store.refuse = lambda pending: False  # type: ignore[method-assign]
    gated.release.set()
    result = await loop.submit("/compact")  # the same engine takes its unclosed start over
    assert isinstance(result, CommandResult) and result.kind == "success", result
    reloaded = store.get(loop.session.id, use_snapshots=False)  # the invariant re-checks the log
    ends = [
        e for e in reloaded.events() if isinstance(e, CompactEnd) and e.compaction_id == first.compaction_id
    ]
    assert len(ends) == 1 and ends[0].error and ends[0].source_command_id == first.source_command_id
