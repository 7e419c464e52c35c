"""``/compact`` in each framework adapter: the user's message runs the manual compaction instead
of a model call, the one-line answer is the assistant's reply, the log brackets it with
``command/run`` / ``command/done`` and the audit says who asked for each compaction."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from compaction.engine.lock import new_lease
from compaction.integrations.memory import CompactingMemory
from compaction.sessions.blocks import text_of
from compaction.sessions.events import CommandDone, CommandRun, UserMessage
from compaction.sessions.session import Session
from compaction.vocabulary.command import FAILURES, NOTHING, USAGE
from compaction.vocabulary.events import CompactEnd, CompactStart
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


def agents_sdk(url: str, **options: Any) -> Conversation:
    session = CompactingSession(KEY, url, context_window=WINDOW, **options)
    models: list[agents_runs.LongRunModel] = []

    async def say(text: str) -> str:
        models.append(agents_runs.LongRunModel(reads=1))
        result = await session.run(agents_runs.agent(models[-1]), text)
        return str(result.final_output)

    return Conversation(session.memory, say, lambda: sum(len(m.inputs) for m in models))


def pydantic_ai(url: str, **options: Any) -> Conversation:
    history = CompactingHistory(url, context_window=WINDOW, **options)
    script = pydantic_runs.Script()
    agent = pydantic_runs.make_agent(script, [history.capability(KEY)])

    async def say(text: str) -> str:
        return (await agent.run(text)).output

    return Conversation(history.memory, say, lambda: len(script.sent))


def langchain(url: str, **options: Any) -> Conversation:
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
    return lambda **options: make(url, **options)


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
