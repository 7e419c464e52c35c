"""The Agents SDK adapter in a backend: compaction before every model call of a long run, runs of
one conversation serialized in one process, a concurrent writer in another process retried, no
store call on the event loop (scenarios 3, 7 and 8 of the adapters' backend use)."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest

from tests.integrations.support import (
    FILE,
    audit_passes,
    every_call_answered_in_order,
    require_framework,
    runs_of,
    surface_here,
)

require_framework("agents", "openai-agents")

from agents import Agent, Runner, function_tool  # noqa: E402
from agents.items import ModelResponse  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from agents.usage import Usage  # noqa: E402
from openai.types.responses import (  # noqa: E402
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from compaction.errors import ConversationConflictError  # noqa: E402
from compaction.integrations.memory import CompactingMemory, UserItem  # noqa: E402
from compaction.integrations.openai_agents import CompactingSession  # noqa: E402
from compaction.sessions.blocks import Message, TextBlock  # noqa: E402
from compaction.sessions.store import SessionStore  # noqa: E402


class LongRunModel(Model):
    """One run's model: reads the file ``reads`` times (one call per model call), then answers the
    run's prompt; keeps every input it was sent, and yields to the loop once per call as a
    network model would."""

    def __init__(self, reads: int) -> None:
        self.reads = reads
        self.inputs: list[list[dict[str, Any]]] = []
        self.prompt = ""

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        await asyncio.sleep(0)
        sent = (
            json.loads(json.dumps(input)) if isinstance(input, list) else [{"content": input, "role": "user"}]
        )
        self.inputs.append(sent)
        prompt = self.prompt = self.prompt or str(sent[-1]["content"])
        n = len(self.inputs)
        if n <= self.reads:
            call = ResponseFunctionToolCall(
                id=f"fc_{n}_{id(self)}",
                call_id=f"r{n}-{prompt.replace(' ', '-')}",
                type="function_call",
                name="read_file",
                arguments=json.dumps({"path": FILE}),
                status="completed",
            )
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        text = ResponseOutputText(type="output_text", text=f"done with {prompt}", annotations=[])
        message = ResponseOutputMessage(
            id=f"msg_{len(self.inputs)}_{id(self)}", type="message", role="assistant", status="completed",
            content=[text],
        )  # fmt: skip
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the tests run the SDK without streaming")


@function_tool
def read_file(path: str) -> str:
    """Read a file of the workspace (about 3 kB)."""
    return f"{path}:\n" + "\n".join(f"{i:4}  total += price * qty  # line {i}" for i in range(80))


def agent(model: Model) -> Agent[Any]:
    return Agent(name="fixer", instructions="You fix bugs.", model=model, tools=[read_file])


def tokens(items: list[dict[str, Any]]) -> int:
    """What a request of ``items`` costs, roughly (4 characters a token)."""
    return len(json.dumps(items)) // 4


async def test_a_long_run_is_compacted_before_every_model_call(url: str) -> None:
    session = CompactingSession("fixer", url, context_window=6000)
    model = LongRunModel(reads=10)
    result = await session.run(agent(model), "task 0: the discount test fails, fix it", max_turns=20)
    assert str(result.final_output).startswith("done with task 0")
    assert len(model.inputs) == 11
    assert session.memory.compactions, "the run never compacted"
    assert max(tokens(sent) for sent in model.inputs) < 6000, [tokens(s) for s in model.inputs]
    assert model.inputs[-1][0]["content"].startswith("task 0"), "the task statement is sent first"
    logged = await session.memory.load("fixer")
    results = [e for e in logged.events() if e.type == "tool/result"]
    assert len(results) == 10, "the log keeps every tool result, compacted or not"
    every_call_answered_in_order(surface_here(url, logged.id))
    audit_passes(url)


async def test_without_the_adapter_the_same_run_exceeds_the_window(url: str) -> None:
    """The baseline the test above is measured against: the same run, no compaction inside it."""
    model = LongRunModel(reads=10)
    await Runner.run(agent(model), "task 0: the discount test fails, fix it", max_turns=20)
    assert max(tokens(sent) for sent in model.inputs) > 6000


async def test_concurrent_runs_of_one_conversation_follow_each_other(url: str) -> None:
    session = CompactingSession("fixer", url, context_window=100_000)
    prompts = [f"question {k}" for k in range(4)]
    await asyncio.gather(*(session.run(agent(LongRunModel(reads=2)), p) for p in prompts))
    runs = runs_of(await session.memory.load("fixer"))
    assert len(runs) == 4
    for run in runs:  # each run's items together: its prompt, two reads, its own answer
        prompt = run[0].message.content[0].text
        assert [e.type for e in run].count("tool/result") == 2
        assert (
            run[-1].type == "assistant/message" and run[-1].message.content[0].text == f"done with {prompt}"
        )
    audit_passes(url)


class OtherWriterFirst:
    """A store whose next ``save`` of a session lets another process (another store on the same
    database) append to that session first, ``times`` times."""

    def __init__(self, store: SessionStore, url: str, times: int) -> None:
        self._store = store
        self._url = url
        self.times = times

    def save(self, session: Any) -> int:
        if self.times > 0:
            self.times -= 1
            other = CompactingMemory(self._url, context_window=100_000, framework="openai-agents")
            message = Message(id=f"other-{self.times}", role="user", content=(TextBlock("from elsewhere"),))
            other.record_sync("fixer", [UserItem(message)], origin="another process")
            other.close()
        return self._store.save(session)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


async def test_a_concurrent_writer_is_reloaded_and_retried_once(url: str) -> None:
    session = CompactingSession("fixer", url, context_window=100_000)
    await session.add_items([{"content": "first", "role": "user"}])
    store = session.memory.store
    session.memory.store = OtherWriterFirst(store, url, times=1)  # type: ignore[assignment]
    await session.add_items([{"content": "second", "role": "user"}])
    texts = [m["content"] for m in await session.get_items()]
    assert texts == ["first", "from elsewhere", "second"], "reloaded, then appended after the other writer"


async def test_a_writer_that_keeps_winning_fails_the_run_saying_what_happened(url: str) -> None:
    session = CompactingSession("fixer", url, context_window=100_000, retries=1)
    await session.add_items([{"content": "first", "role": "user"}])
    session.memory.store = OtherWriterFirst(session.memory.store, url, times=2)  # type: ignore[assignment]
    with pytest.raises(ConversationConflictError, match=r"another writer.*retrying 1 time"):
        await session.add_items([{"content": "second", "role": "user"}])
    none = CompactingSession("fixer", url, context_window=100_000, retries=0)
    none.memory.store = OtherWriterFirst(none.memory.store, url, times=1)  # type: ignore[assignment]
    with pytest.raises(ConversationConflictError, match="retrying 0 time"):
        await none.add_items([{"content": "third", "role": "user"}])


class LoopWatch:
    """A store that notes every call made on the event loop's thread."""

    def __init__(self, store: SessionStore, loop_thread: int) -> None:
        self._store = store
        self._loop_thread = loop_thread
        self.on_loop: list[str] = []
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._store, name)
        if not callable(found):
            return found

        def watched(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if threading.get_ident() == self._loop_thread:
                self.on_loop.append(name)
            return found(*args, **kwargs)

        return watched


async def test_no_store_call_runs_on_the_event_loop(durable_store_url: str) -> None:
    memory = CompactingMemory(durable_store_url, context_window=6000, framework="openai-agents")
    watch = LoopWatch(memory.store, threading.get_ident())
    memory.store = watch  # type: ignore[assignment]
    sessions = [CompactingSession(f"user-{k}", memory=memory) for k in range(20)]
    await asyncio.gather(*(s.run(agent(LongRunModel(reads=8)), f"task {k}") for k, s in enumerate(sessions)))
    assert memory.compactions and watch.calls > 100
    assert watch.on_loop == [], f"store calls on the event loop: {sorted(set(watch.on_loop))}"
