"""``/compact`` in each framework adapter: the user's message runs the manual compaction instead
of a model call, the one-line answer is the assistant's reply, the log brackets it with
``command/run`` / ``command/done`` and the audit says who asked for each compaction. Each failure
has its text (a failing summarizer, another writer changing the span, a store refusing the commit
or the start), and cancelling the framework's run cancels the command: its bracket is closed as
cancelled, or, when that close cannot be stored, left as an inert orphan ``recover`` closes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from compaction.engine.lock import FAILURE_DIR_VARIABLE, new_lease
from compaction.errors import SummarizerError
from compaction.integrations.memory import CompactingMemory
from compaction.sessions.blocks import Message, TextBlock, text_of
from compaction.sessions.events import CommandDone, CommandRun, Replace, UserMessage
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from compaction.vocabulary.command import FAILURES, NOTHING, USAGE
from compaction.vocabulary.events import CompactEnd, CompactStart, CompactSummary
from compaction.vocabulary.summarizer import SummaryRequest
from tests.builders import run_json
from tests.compaction.test_compact_command import RefusingStore
from tests.compaction.test_support import FailingSummarizer, GatedSummarizer, ScriptedSummarizer, sectioned
from tests.integrations.support import audit_passes, prompt, require_framework

require_framework("agents", "openai-agents")
require_framework("pydantic_ai", "pydantic-ai")
require_framework("langchain.agents", "langchain")

from langchain.agents import create_agent  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

from compaction.integrations.langchain import CompactionMiddleware  # noqa: E402
from compaction.integrations.openai_agents import CompactingSession  # noqa: E402
from compaction.integrations.pydantic_ai import CompactingHistory  # noqa: E402
from tests.integrations import test_agents_runs as agents_runs  # noqa: E402
from tests.integrations import test_langchain_runs as langchain_runs  # noqa: E402
from tests.integrations import test_pydantic_ai_runs as pydantic_runs  # noqa: E402

WINDOW = 20_000
KEY = "fixer"


@dataclass
class Conversation:
    """One framework's agent over the adapter: ``say`` runs one user message and returns the
    assistant's reply; ``calls`` counts the model calls so far."""

    memory: CompactingMemory
    say: Callable[[str], Awaitable[str]]
    calls: Callable[[], int]


def agents_sdk(url: str | None, **options: Any) -> Conversation:
    session = CompactingSession(KEY, url, context_window=WINDOW, **options)
    models: list[agents_runs.LongRunModel] = []

    async def say(text: str) -> str:
        models.append(agents_runs.LongRunModel(reads=1))
        result = await session.run(agents_runs.agent(models[-1]), text)
        return str(result.final_output)

    return Conversation(session.memory, say, lambda: sum(len(m.inputs) for m in models))


def pydantic_ai(url: str | None, **options: Any) -> Conversation:
    history = CompactingHistory(url, context_window=WINDOW, **options)
    script = pydantic_runs.Script()
    agent = pydantic_runs.make_agent(script, [history.capability(KEY)])

    async def say(text: str) -> str:
        return (await agent.run(text)).output

    return Conversation(history.memory, say, lambda: len(script.sent))


def langchain(url: str | None, **options: Any) -> Conversation:
    middleware = CompactionMiddleware(url, context_window=WINDOW, **options)
    model = langchain_runs.ReadingModel(messages=iter(()), sent=[])
    agent = create_agent(
        model, tools=[langchain_runs.read_file], middleware=[middleware], checkpointer=InMemorySaver()
    )

    async def say(text: str) -> str:
        state = await agent.ainvoke(
            {"messages": [{"role": "user", "content": text}]}, {"configurable": {"thread_id": KEY}}
        )
        return str(state["messages"][-1].content)

    return Conversation(middleware.memory, say, lambda: len(model.sent))


FRAMEWORKS = {"openai-agents": agents_sdk, "pydantic-ai": pydantic_ai, "langchain": langchain}


@pytest.fixture(params=sorted(FRAMEWORKS))
def conversation(request: pytest.FixtureRequest, url: str) -> Callable[..., Conversation]:
    make = FRAMEWORKS[request.param]
    return lambda **options: make(None if "store" in options else url, **options)


async def worked(chat: Conversation, turns: int = 3) -> None:
    for k in range(turns):
        await chat.say(prompt(k))


def the_command(session: Session) -> tuple[CommandRun, CommandDone]:
    runs = [e for e in session.events() if isinstance(e, CommandRun)]
    dones = [e for e in session.events() if isinstance(e, CommandDone)]
    assert len(runs) == len(dones) == 1 and runs[0].command_id == dones[0].command_id
    return runs[0], dones[0]


async def test_compact_compacts_without_a_model_call_and_the_audit_names_the_command(
    conversation: Callable[..., Conversation], url: str
) -> None:
    chat = conversation()
    await worked(chat)
    calls = chat.calls()
    before = len((await chat.memory.load(KEY)).derive_messages())
    answer = await chat.say("/compact")
    assert answer.startswith("Compacted ") and answer.endswith(" tokens)."), answer
    assert chat.calls() == calls, "the model was called for /compact"
    session = await chat.memory.load(KEY)
    run, done = the_command(session)
    assert (run.name, run.args, done.kind, done.text) == ("compact", "", "success", answer)
    between = [e.type for e in session.events(run.seq + 1, done.seq)]
    assert between[0] == "compact/start" and between[-1] == "compact/end", between
    asked = [text_of(e.message.content) for e in session.events() if isinstance(e, UserMessage)]
    assert "/compact" not in asked, "the command is no user prompt of the conversation"
    assert len(session.derive_messages()) < before
    compactions = audit_passes(url)
    assert [c["command"] for c in compactions] == [f"/compact (command {run.command_id})"]
    reply = await chat.say(prompt(3))
    assert "/compact" not in reply and chat.calls() > calls, "the conversation goes on"
    assert (await chat.memory.load(KEY)).type_counts["turn/end"] == 4
    audit_passes(url)


async def test_compact_with_nothing_to_compact(conversation: Callable[..., Conversation]) -> None:
    chat = conversation()
    assert await chat.say("/compact") == NOTHING
    assert chat.calls() == 0
    assert the_command(await chat.memory.load(KEY))[1].text == NOTHING


async def test_arguments_are_refused_without_custom_instructions(
    conversation: Callable[..., Conversation],
) -> None:
    chat = conversation()
    await worked(chat)
    assert await chat.say("/compact keep the file names") == USAGE
    session = await chat.memory.load(KEY)
    assert the_command(session)[0].args == "keep the file names"
    assert session.last_of(CompactStart.TYPE) is None


async def test_arguments_are_the_focus_with_custom_instructions(
    conversation: Callable[..., Conversation],
) -> None:
    chat = conversation(custom_instructions=True)
    await worked(chat)
    assert (await chat.say("/compact keep the file names")).startswith("Compacted ")
    session = await chat.memory.load(KEY)
    start = session.event(session.last_of(CompactStart.TYPE) or -1)
    assert isinstance(start, CompactStart) and start.focus == "keep the file names"


async def test_busy_when_a_live_compaction_holds_the_lock(conversation: Callable[..., Conversation]) -> None:
    chat = conversation()
    await worked(chat)
    session = await chat.memory.load(KEY)
    session.append(CompactStart(compaction_id="other", turn=None, lease=new_lease(60)))
    chat.memory.store.save(session)
    calls = chat.calls()
    assert await chat.say("/compact") == FAILURES["busy"]
    assert chat.calls() == calls
    session = await chat.memory.load(KEY)  # the other compaction gives up: its bracket closes
    session.append(CompactEnd(compaction_id="other", turn=None, error="the test's other compaction gave up"))
    chat.memory.store.save(session)


# ---------------------------------------------------------------- failures and cancellation


def refusing(url: str) -> RefusingStore:
    """A real store of ``url`` that refuses the saves its ``refuse`` picks."""
    store = RefusingStore.open(url)
    assert isinstance(store, RefusingStore)
    return store


def surface_of(session: Session) -> tuple[int, ...]:
    return tuple(session.nodes)


def failed_bracket(session: Session) -> tuple[CommandRun, CommandDone, CompactEnd]:
    """The command's records of a compaction that failed: ``compact/start`` and its erring
    ``compact/end``, both carrying the command's id, between ``command/run`` and ``command/done``."""
    run, done = the_command(session)
    between = list(session.events(run.seq + 1, done.seq))
    assert [e.type for e in between] == ["compact/start", "compact/end"], between
    start, end = between
    assert isinstance(start, CompactStart) and isinstance(end, CompactEnd)
    assert start.source_command_id == end.source_command_id == run.command_id
    assert end.error and done.kind == "error"
    return run, done, end


async def test_a_summarizer_failure_answers_summary(conversation: Callable[..., Conversation]) -> None:
    chat = conversation(summarizer=FailingSummarizer(SummarizerError("model down")))
    await worked(chat)
    surface, calls = surface_of(await chat.memory.load(KEY)), chat.calls()
    assert await chat.say("/compact") == FAILURES["summary"]
    assert chat.calls() == calls
    session = await chat.memory.load(KEY)
    _, done, end = failed_bracket(session)
    assert done.text == FAILURES["summary"] and "model down" in (end.error or "")
    assert surface_of(session) == surface, "a failed compaction leaves the surface as it was"


async def test_another_writer_changing_the_span_answers_changed(
    conversation: Callable[..., Conversation], url: str
) -> None:
    def rewrite(request: SummaryRequest) -> None:
        """Another writer (a store of its own) edits a prompt of the span while it is summarized."""
        span = {m.id for m in request.messages}
        with SessionStore.open(url) as other:
            session = other.get(UUID(request.session_id))
            target = next(
                s for s in reversed(session.nodes)
                if isinstance(e := session.event(s), UserMessage) and e.message.id in span
            )  # fmt: skip
            edited = Message(id="edited", role="user", content=(TextBlock("edited elsewhere"),))
            session.append(
                UserMessage(message=edited, surface_op=Replace(target, target), source_event_seqs=(target,))
            )
            other.save(session)

    chat = conversation(summarizer=ScriptedSummarizer(sectioned(), on_summarize=rewrite))
    await worked(chat)
    assert await chat.say("/compact") == FAILURES["changed"]
    session = await chat.memory.load(KEY)
    run, done = the_command(session)
    assert done.text == FAILURES["changed"]
    end = session.event(session.last_of(CompactEnd.TYPE) or -1)
    assert isinstance(end, CompactEnd) and end.error and end.source_command_id == run.command_id
    assert session.last_of(CompactSummary.TYPE) is None, "nothing was committed"
    assert "edited elsewhere" in [text_of(m.content) for m in session.derive_messages()]


async def test_a_refused_commit_answers_commit(conversation: Callable[..., Conversation], url: str) -> None:
    store = refusing(url)
    chat = conversation(store=store)
    await worked(chat)
    surface = surface_of(await chat.memory.load(KEY))
    store.refuse = lambda pending: any(isinstance(e, CompactSummary) for e in pending)
    assert await chat.say("/compact") == FAILURES["commit"]
    session = store.get((await chat.memory.load(KEY)).id, use_snapshots=False)
    _, done, end = failed_bracket(session)
    assert done.text == FAILURES["commit"] and "refused by the test store" in (end.error or "")
    assert surface_of(session) == surface
    store.close()


async def test_a_store_refusing_the_start_answers_persistence(
    conversation: Callable[..., Conversation], url: str
) -> None:
    store = refusing(url)
    chat = conversation(store=store)
    await worked(chat)
    store.refuse = lambda pending: any(isinstance(e, CompactStart) for e in pending)
    assert await chat.say("/compact") == FAILURES["persistence"]
    session = store.get((await chat.memory.load(KEY)).id, use_snapshots=False)
    run, done = the_command(session)
    assert done.text == FAILURES["persistence"] and done.seq == run.seq + 1, "no start was stored"
    store.close()


async def cancelled_during_the_summary(chat: Conversation, gated: GatedSummarizer) -> None:
    """``/compact`` sent, then the framework's run cancelled while the summary is awaited."""
    task = asyncio.ensure_future(chat.say("/compact"))
    await gated.entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_cancelling_the_run_cancels_the_command_and_closes_its_bracket(
    conversation: Callable[..., Conversation], url: str
) -> None:
    gated = GatedSummarizer(sectioned())
    chat = conversation(summarizer=gated)
    await worked(chat)
    surface, calls = surface_of(await chat.memory.load(KEY)), chat.calls()
    await cancelled_during_the_summary(chat, gated)
    session = await chat.memory.load(KEY)
    _, done, end = failed_bracket(session)
    assert done.text == FAILURES["cancelled"] and (end.error or "").startswith("cancelled")
    assert surface_of(session) == surface and chat.calls() == calls
    assert run_json("--store", url, "recover")[1]["orphans"] == [], "the bracket is closed"
    gated.release.set()
    assert "/compact" not in await chat.say(prompt(3)) and chat.calls() > calls, "the conversation goes on"
    audit_passes(url)


async def test_a_cancellation_whose_close_cannot_be_stored_leaves_an_inert_orphan_recover_closes(
    conversation: Callable[..., Conversation], url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FAILURE_DIR_VARIABLE, str(tmp_path / "failures"))
    store = refusing(url)
    gated = GatedSummarizer(sectioned())
    chat = conversation(store=store, summarizer=gated)
    await worked(chat)
    session_id = (await chat.memory.load(KEY)).id
    store.refuse = lambda pending: any(isinstance(e, CompactEnd) for e in pending)
    await cancelled_during_the_summary(chat, gated)
    session = store.get(session_id, use_snapshots=False)
    run, done = the_command(session)
    start = session.event(run.seq + 1)
    assert isinstance(start, CompactStart) and start.source_command_id == run.command_id
    assert done.seq == start.seq + 1 and done.text == FAILURES["cancelled"], "the start is left unclosed"
    status, document = run_json("--store", url, "recover", "--repair")
    assert status == 0, document
    (orphan,) = document["orphans"]
    assert (orphan["start_seq"], orphan["inert"], orphan["action"]) == (start.seq, True, "repaired")
    repaired = store.get(session_id, use_snapshots=False)
    end = repaired.event(repaired.last_of(CompactEnd.TYPE) or -1)
    assert isinstance(end, CompactEnd) and end.compaction_id == start.compaction_id and end.error
    assert surface_of(repaired) == surface_of(session)
    store.close()
