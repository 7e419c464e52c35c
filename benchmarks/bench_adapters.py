"""The adapters in an agent backend: 20 concurrent conversations on PostgreSQL, one event loop.

For each framework (OpenAI Agents SDK, pydantic-ai, LangChain), :data:`CONVERSATIONS` conversations
run concurrently on one event loop, each :data:`TURNS` turns of a tool call and an answer, with the
framework's offline model (which yields to the loop once per call, as a network model would) and
the adapter on a fresh PostgreSQL database (window :data:`WINDOW`: the conversations compact). A
heartbeat task on the same loop sleeps :data:`BEAT` seconds in a loop and notes how late it wakes:
a store call made on the event loop would show here. Targets: the heartbeat's p99 lag at most
:data:`P99_TARGET_MS` ms and its maximum at most :data:`MAX_TARGET_MS` ms. Turns per second are
reported against the same framework without the adapter (its history kept in memory), for
information.

    .venv/bin/python -m benchmarks.bench_adapters
    .venv/bin/python -m benchmarks.run adapters

PostgreSQL: ``$COMPACTION_BENCH_PG`` (default ``postgresql://postgres@127.0.0.1:5432``), as the
scale-out benchmark.
"""

from __future__ import annotations

import asyncio
import json
import logging
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_scaleout import PG_BASE, scratch_database
from benchmarks.common import Result

CONVERSATIONS = 20
TURNS = 5
WINDOW = 6000
BEAT = 0.005
P99_TARGET_MS = 20.0
MAX_TARGET_MS = 100.0
FILE = "src/shop/cart.py"
OUTPUT = f"{FILE}:\n" + "\n".join(f"{i:4}  total += price * qty  # line {i}" for i in range(60))

Conversation = Callable[[int], Awaitable[None]]


class Heartbeat:
    """Sleeps :data:`BEAT` seconds in a loop on the running loop; keeps how late each wake was."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _beat(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            start = loop.time()
            await asyncio.sleep(BEAT)
            self.lags.append(loop.time() - start - BEAT)

    def __enter__(self) -> Heartbeat:
        self._task = asyncio.get_running_loop().create_task(self._beat())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()

    def p99_ms(self) -> float:
        ordered = sorted(self.lags)
        return 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else 0.0

    def median_ms(self) -> float:
        return 1000 * statistics.median(self.lags) if self.lags else 0.0

    def max_ms(self) -> float:
        return 1000 * max(self.lags, default=0.0)


async def timed_run(conversation: Conversation) -> tuple[float, Heartbeat]:
    with Heartbeat() as heartbeat:
        start = time.perf_counter()
        await asyncio.gather(*(conversation(k) for k in range(CONVERSATIONS)))
        elapsed = time.perf_counter() - start
    return elapsed, heartbeat


# ---------------------------------------------------------------- OpenAI Agents SDK


def agents_runs(url: str | None) -> Conversation:
    from agents import Agent, Runner, function_tool, set_tracing_disabled
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    from compaction.integrations.memory import CompactingMemory
    from compaction.integrations.openai_agents import CompactingSession

    set_tracing_disabled(True)

    class Offline(Model):
        def __init__(self) -> None:
            self.calls = 0

        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            await asyncio.sleep(0)
            self.calls += 1
            if self.calls % 2:
                call = ResponseFunctionToolCall(
                    id=f"fc_{self.calls}", call_id=f"call_{self.calls}", type="function_call",
                    name="read_file", arguments=json.dumps({"path": FILE}), status="completed",
                )  # fmt: skip
                return ModelResponse(output=[call], usage=Usage(), response_id=None)
            text = ResponseOutputText(
                type="output_text", text="apply_discount lacks rounding", annotations=[]
            )
            answer = ResponseOutputMessage(
                id=f"msg_{self.calls}", type="message", role="assistant", status="completed", content=[text]
            )
            return ModelResponse(output=[answer], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    @function_tool
    def read_file(path: str) -> str:
        """Read a file of the workspace."""
        return OUTPUT

    memory = (
        CompactingMemory(url, context_window=WINDOW, framework="openai-agents") if url is not None else None
    )

    async def conversation(k: int) -> None:
        agent = Agent(name="fixer", instructions="You fix bugs.", model=Offline(), tools=[read_file])
        if memory is not None:
            session = CompactingSession(f"user-{k}", memory=memory)
            for turn in range(TURNS):
                await session.run(agent, f"turn {turn}: fix {FILE}")
            return
        history: list[Any] = []
        for turn in range(TURNS):
            result = await Runner.run(
                agent, [*history, {"role": "user", "content": f"turn {turn}: fix {FILE}"}]
            )
            history = result.to_input_list()

    return conversation


# ---------------------------------------------------------------- pydantic-ai


def pydantic_runs(url: str | None) -> Conversation:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from compaction.integrations.pydantic_ai import CompactingHistory

    async def offline(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await asyncio.sleep(0)
        if any(isinstance(part, ToolReturnPart) for part in messages[-1].parts):
            return ModelResponse(parts=[TextPart("apply_discount lacks rounding")])
        return ModelResponse(parts=[ToolCallPart("read_file", {"path": FILE})])

    history = CompactingHistory(url, context_window=WINDOW) if url is not None else None
    agent = Agent(
        FunctionModel(offline), instructions="You fix bugs.",
        capabilities=[history.capability()] if history is not None else [],
    )  # fmt: skip

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a file of the workspace."""
        return OUTPUT

    async def conversation(k: int) -> None:
        earlier: list[ModelMessage] = []
        for turn in range(TURNS):
            prompt = f"turn {turn}: fix {FILE}"
            if history is not None:
                await agent.run(prompt, conversation_id=f"user-{k}")
            else:
                earlier = (await agent.run(prompt, message_history=earlier)).all_messages()

    return conversation


# ---------------------------------------------------------------- LangChain


def langchain_runs(url: str | None) -> Conversation:
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver

    from compaction.integrations.langchain import CompactionMiddleware

    class Offline(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> ChatResult:
            if isinstance(messages[-1], ToolMessage):
                message = AIMessage(content="apply_discount lacks rounding")
            else:
                call = {
                    "name": "read_file",
                    "args": {"path": FILE},
                    "id": f"call_{len(messages)}",
                    "type": "tool_call",
                }
                message = AIMessage(content="", tool_calls=[call])
            return ChatResult(generations=[ChatGeneration(message=message)])

        async def _agenerate(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> ChatResult:
            await asyncio.sleep(0)
            return self._generate(messages)

    @tool
    def read_file(path: str) -> str:
        """Read a file of the workspace."""
        return OUTPUT

    middleware = [CompactionMiddleware(url, context_window=WINDOW)] if url is not None else []
    agent = create_agent(
        Offline(messages=iter(())), tools=[read_file], middleware=middleware, checkpointer=InMemorySaver()
    )

    async def conversation(k: int) -> None:
        thread = {"configurable": {"thread_id": f"user-{k}"}}
        for turn in range(TURNS):
            await agent.ainvoke(
                {"messages": [{"role": "user", "content": f"turn {turn}: fix {FILE}"}]}, thread
            )

    return conversation


FRAMEWORKS: dict[str, Callable[[str | None], Conversation]] = {
    "openai-agents": agents_runs,
    "pydantic-ai": pydantic_runs,
    "langchain": langchain_runs,
}


def measure(framework: str, base: str = PG_BASE) -> list[Result]:
    make = FRAMEWORKS[framework]
    turns = CONVERSATIONS * TURNS
    plain, alone = asyncio.run(timed_run(make(None)))
    with scratch_database(base) as url:
        ours, heartbeat = asyncio.run(timed_run(make(url)))
    where = f"{CONVERSATIONS} conversations x {TURNS} turns, PostgreSQL"
    return [
        Result(
            f"adapters: {framework} heartbeat lag p99 ({where})", f"{heartbeat.p99_ms():.1f} ms",
            f"{alone.p99_ms():.1f} ms without the adapter", heartbeat.p99_ms(), P99_TARGET_MS, False,
        ),
        Result(
            f"adapters: {framework} heartbeat lag max", f"{heartbeat.max_ms():.1f} ms",
            f"{alone.max_ms():.1f} ms without (median {heartbeat.median_ms():.1f})",
            heartbeat.max_ms(),
            MAX_TARGET_MS, False,
        ),
        Result(
            f"adapters: {framework} turns/s with the adapter vs without", f"{turns / ours:.1f} turns/s",
            f"{turns / plain:.1f} turns/s without", (turns / ours) / (turns / plain), None, True,
        ),
    ]  # fmt: skip


def run() -> list[Result]:
    logging.getLogger("compaction").setLevel(logging.ERROR)
    return [row for framework in FRAMEWORKS for row in measure(framework)]


if __name__ == "__main__":
    from benchmarks.run import table

    print(table(run()))
