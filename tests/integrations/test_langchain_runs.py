"""LangChain with the usual checkpointer and ``thread_id``: the agent state left alone unless a
compaction replaced something (usage and response metadata, tool artifacts and ids survive),
compaction before every model call of a long run (scenarios 3 and 5 of the backend use)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.integrations.support import (
    FILE,
    audit_passes,
    every_call_answered_in_order,
    prompt,
    require_framework,
    surface_here,
)

require_framework("langchain.agents", "langchain")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

from compaction.integrations.langchain import CompactionMiddleware  # noqa: E402


class ReadingModel(GenericFakeChatModel):
    """Reads the file ``reads`` times after a human message, then answers with usage metadata;
    keeps what it was sent."""

    sent: list[list[BaseMessage]] = []  # noqa: RUF012 - a pydantic field, one list per instance
    reads: int = 1
    prompt: str = ""
    since: int = 0
    call_prefix: str = "call"  # a process that restarts a conversation names its calls apart

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.sent.append(list(messages))
        asked = [str(m.content) for m in messages if isinstance(m, HumanMessage)]
        latest = next(a for a in reversed(asked) if a.startswith(("task", "follow-up")))
        if latest != self.prompt:
            self.prompt, self.since = latest, 0
        since = self.since
        self.since += 1
        n = len(self.sent)
        usage = {"input_tokens": 10 * n, "output_tokens": n, "total_tokens": 11 * n}
        metadata = {"model_name": "fake-reader", "finish_reason": "stop"}
        if since < self.reads:
            call = {
                "name": "read_file",
                "args": {"path": FILE},
                "id": f"{self.call_prefix}_{n}",
                "type": "tool_call",
            }
            message = AIMessage(
                content="", tool_calls=[call], usage_metadata=usage, response_metadata=metadata
            )
        else:
            message = AIMessage(content=f"answer {n}", usage_metadata=usage, response_metadata=metadata)
        return ChatResult(generations=[ChatGeneration(message=message)])


@tool(response_format="content_and_artifact")
def read_file(path: str) -> tuple[str, dict[str, Any]]:
    """Read a file of the workspace (about 3 kB)."""
    text = f"{path}:\n" + "\n".join(f"{i:4}  total += price * qty  # line {i}" for i in range(80))
    return text, {"path": path, "lines": 80}


THREAD = {"configurable": {"thread_id": "support-1"}}


async def test_the_state_is_left_alone_without_a_compaction(url: str) -> None:
    model = ReadingModel(messages=iter(()), sent=[])
    middleware = CompactionMiddleware(url, context_window=100_000)
    agent = create_agent(model, tools=[read_file], middleware=[middleware], checkpointer=InMemorySaver())
    plain = create_agent(
        ReadingModel(messages=iter(()), sent=[]), tools=[read_file], checkpointer=InMemorySaver()
    )
    for k in range(2):
        ours = await agent.ainvoke({"messages": [{"role": "user", "content": prompt(k)}]}, THREAD)
        theirs = await plain.ainvoke({"messages": [{"role": "user", "content": prompt(k)}]}, THREAD)
    assert [_fields(m) for m in ours["messages"]] == [_fields(m) for m in theirs["messages"]]
    answers = [m for m in ours["messages"] if isinstance(m, AIMessage)]
    assert all(m.usage_metadata and m.response_metadata["model_name"] == "fake-reader" for m in answers)
    results = [m for m in ours["messages"] if isinstance(m, ToolMessage)]
    assert [m.artifact for m in results] == [{"path": FILE, "lines": 80}] * 2


async def test_a_long_run_is_compacted_before_every_model_call_and_keeps_what_it_can(url: str) -> None:
    model = ReadingModel(messages=iter(()), sent=[], reads=10)
    middleware = CompactionMiddleware(url, context_window=6000)
    agent = create_agent(model, tools=[read_file], middleware=[middleware], checkpointer=InMemorySaver())
    state = await agent.ainvoke({"messages": [{"role": "user", "content": prompt(0)}]}, THREAD)
    assert str(state["messages"][-1].content).startswith("answer")
    assert middleware.memory.compactions, "the run never compacted"
    sizes = [len(json.dumps([str(m.content) for m in sent])) // 4 for sent in model.sent]
    assert max(sizes) < 6000, sizes
    assert model.sent[-1][0].content == prompt(0), "the task statement is sent first"
    kept = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert kept and all(m.artifact == {"path": FILE, "lines": 80} for m in kept), (
        "kept messages keep their artifact"
    )
    session = await middleware.memory.load("support-1")
    assert sum(1 for e in session.events() if e.type == "tool/result") == 10
    every_call_answered_in_order(surface_here(url, session.id))
    audit_passes(url)


def _fields(message: BaseMessage) -> tuple[Any, ...]:
    return (
        type(message).__name__,
        message.content,
        getattr(message, "tool_calls", None),
        getattr(message, "usage_metadata", None),
        message.response_metadata,
        getattr(message, "artifact", None),
    )


async def test_concurrent_threads_through_one_middleware_each_keep_their_own_turns(url: str) -> None:
    middleware = CompactionMiddleware(url, context_window=6000)

    async def conversation(k: int) -> None:
        model = ReadingModel(messages=iter(()), sent=[])  # one model per user: its script is per prompt
        agent = create_agent(model, tools=[read_file], middleware=[middleware])
        thread = {"configurable": {"thread_id": f"user-{k}"}}
        messages: list[Any] = []
        for turn in range(3):
            ask = {"role": "user", "content": prompt(turn) + f" (user {k})"}
            messages = (await agent.ainvoke({"messages": [*messages, ask]}, thread))["messages"]

    await asyncio.gather(*(conversation(k) for k in range(5)))
    for k in range(5):
        session = await middleware.memory.load(f"user-{k}")
        asked = [e.message.content[0].text for e in session.events() if e.type == "user/message"]
        mine = [a for a in asked if a.endswith(")") and "(user " in a]
        assert mine == [prompt(turn) + f" (user {k})" for turn in range(3)], "each thread its own prompts"
        assert session.type_counts["turn/end"] == 3
    audit_passes(url)


@pytest.mark.parametrize("api", ["ainvoke", "invoke in threads", "invoke in threads and ainvoke"])
async def test_concurrent_runs_on_one_thread_follow_each_other(url: str, api: str) -> None:
    """Four runs of one thread at once (``ainvoke``, ``invoke`` from four threads, or two of each):
    each run waits for the one before it (the thread's run lock, from before_agent to after_agent,
    one lock for sync and async runs), so the log holds each run's prompt, calls, results and
    answer together, and each run starts from the state the one before left."""
    model = ReadingModel(messages=iter(()), sent=[], reads=2)
    middleware = CompactionMiddleware(url, context_window=100_000)
    agent = create_agent(model, tools=[read_file], middleware=[middleware], checkpointer=InMemorySaver())
    asks = [prompt(k) for k in range(4)]
    inputs = [{"messages": [{"role": "user", "content": a}]} for a in asks]
    if api == "ainvoke":
        states = await asyncio.gather(*(agent.ainvoke(i, THREAD) for i in inputs))
    elif api == "invoke in threads":
        states = await asyncio.gather(*(asyncio.to_thread(agent.invoke, i, THREAD) for i in inputs))
    else:
        runs = [agent.ainvoke(i, THREAD) if k % 2 else asyncio.to_thread(agent.invoke, i, THREAD)
                for k, i in enumerate(inputs)]  # fmt: skip
        states = await asyncio.gather(*runs)
    session = await middleware.memory.load("support-1")
    turns: list[list[str]] = []
    for event in session.events():
        if event.type == "user/message":
            turns.append([])
        message = getattr(event, "message", None)
        if message is not None:
            turns[-1].append(event.type)
    assert len(turns) == 4 and session.type_counts["turn/end"] == 4
    expected = ["user/message", *["assistant/message", "tool/result"] * 2, "assistant/message"]
    assert turns == [expected] * 4, turns
    prompts = [e.message.content[0].text for e in session.events() if e.type == "user/message"]
    assert sorted(prompts) == sorted(asks)
    last = max(states, key=lambda state: len(state["messages"]))
    seen = [str(m.content) for m in last["messages"] if isinstance(m, HumanMessage)]
    assert seen == prompts, "the last run starts from every earlier run's turn"
    assert not middleware.memory.run_lock("support-1").locked() and not middleware._holders
    every_call_answered_in_order(surface_here(url, session.id))
    audit_passes(url)


class FailingOnceModel(ReadingModel):
    """Fails its first call (a provider outage), then reads and answers as ReadingModel."""

    failed: bool = False

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        if not self.failed:
            self.failed = True
            raise ConnectionError("the provider is down (the test)")
        return super()._generate(messages, stop, run_manager, **kwargs)


async def test_a_failed_run_lets_its_thread_go(url: str) -> None:
    model = FailingOnceModel(messages=iter(()), sent=[])
    middleware = CompactionMiddleware(url, context_window=100_000)
    agent = create_agent(model, tools=[read_file], middleware=[middleware], checkpointer=InMemorySaver())
    with pytest.raises(ConnectionError):
        await agent.ainvoke({"messages": [{"role": "user", "content": prompt(0)}]}, THREAD)
    assert not middleware.memory.run_lock("support-1").locked(), "the failed run still holds the thread"
    ask = {"messages": [{"role": "user", "content": prompt(1)}]}
    state = await asyncio.wait_for(agent.ainvoke(ask, THREAD), timeout=30)
    assert str(state["messages"][-1].content).startswith("answer")
    assert not middleware.memory.run_lock("support-1").locked()
