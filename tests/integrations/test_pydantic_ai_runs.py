"""pydantic-ai with the capability alone: every message of every run recorded (final answers
included), the conversation handed to the model, ``new_messages()`` as without the capability,
compaction before every model request of a long run, a sync load for ``run_sync`` (scenarios 3
and 4 of the adapters' backend use)."""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integrations.support import FILE, audit_passes, prompt, require_framework

require_framework("pydantic_ai", "pydantic-ai")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

from compaction.integrations.pydantic_ai import CompactingHistory  # noqa: E402
from compaction.sessions.blocks import tool_calls_of  # noqa: E402


class Script:
    """Reads the file ``reads`` times after each prompt, then answers; keeps what it was sent."""

    def __init__(self, reads: int = 1) -> None:
        self.reads = reads
        self.sent: list[list[ModelMessage]] = []
        self.since_prompt = 0

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.sent.append(list(messages))
        last = messages[-1]
        if any(isinstance(p, UserPromptPart) for p in last.parts):
            self.since_prompt = 0
        if self.since_prompt < self.reads:
            self.since_prompt += 1
            return ModelResponse(
                parts=[ToolCallPart("read_file", {"path": FILE}, tool_call_id=f"c{len(self.sent)}")]
            )
        return ModelResponse(parts=[TextPart(f"answer {len(self.sent)}: apply_discount lacks rounding")])


def make_agent(script: Script, capabilities: list[Any]) -> Agent[None, str]:
    agent = Agent(FunctionModel(script), instructions="You fix bugs.", capabilities=capabilities)

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a file of the workspace (about 3 kB)."""
        return f"{path}:\n" + "\n".join(f"{i:4}  total += price * qty  # line {i}" for i in range(80))

    return agent


def shape(messages: list[ModelMessage]) -> list[tuple[str, list[tuple[str, str]]]]:
    """Kinds, part kinds and contents: what two runs' messages are compared by."""
    return [(m.kind, [(p.part_kind, _content(p)) for p in m.parts]) for m in messages]


def _content(part: Any) -> str:
    if isinstance(part, ToolCallPart):
        return json.dumps(part.args_as_dict(), sort_keys=True)
    return str(getattr(part, "content", ""))


async def test_the_capability_alone_records_every_run_and_keeps_new_messages_native(url: str) -> None:
    history = CompactingHistory(url, context_window=100_000)
    ours, native = Script(), Script()
    agent = make_agent(ours, [history.capability("fixer")])
    plain = make_agent(native, [])
    earlier: list[ModelMessage] = []
    for k in range(3):
        result = await agent.run(prompt(k))
        reference = await plain.run(prompt(k), message_history=earlier)
        earlier = reference.all_messages()
        assert shape(result.new_messages()) == shape(reference.new_messages()), f"run {k}"
        assert len(result.new_messages()) == 4
    assert shape(ours.sent[-1]) == shape(native.sent[-1]), "the model is sent what it is sent natively"
    for request in (m for m in ours.sent[-1] if isinstance(m, ModelRequest)):
        kinds = {p.part_kind for p in request.parts}
        assert not {"tool-return", "user-prompt"} <= kinds, "a tool return and a prompt merged"
    session = await history.memory.load("fixer")
    answers = [e for e in session.events() if e.type == "assistant/message" and not tool_calls_of(e.message)]
    assert len(answers) == 3, "every final answer is in the log"
    audit_passes(url)


async def test_the_run_conversation_id_names_the_conversation(url: str) -> None:
    history = CompactingHistory(url, context_window=100_000)
    script = Script()
    agent = make_agent(script, [history.capability()])
    await agent.run(prompt(0), conversation_id="user-1")
    await agent.run(prompt(1), conversation_id="user-2")
    await agent.run(prompt(2), conversation_id="user-1")
    sent = json.dumps(shape(script.sent[-1]))
    assert prompt(0) in sent and prompt(1) not in sent


async def test_a_long_run_is_compacted_before_every_model_request(url: str) -> None:
    history = CompactingHistory(url, context_window=6000)
    script = Script(reads=10)
    result = await make_agent(script, [history.capability("fixer")]).run(prompt(0))
    assert result.output.startswith("answer")
    assert history.memory.compactions, "the run never compacted"
    sizes = [len(json.dumps(shape(sent))) // 4 for sent in script.sent]
    assert max(sizes) < 6000, sizes
    assert len(result.new_messages()) == 22, "the run's own history is whole"
    session = await history.memory.load("fixer")
    assert sum(1 for e in session.events() if e.type == "tool/result") == 10
    audit_passes(url)


@pytest.fixture
def sync_runs() -> Iterator[None]:
    """``run_sync`` leaves the event loop it made set on the thread: closed after the test."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        loop = asyncio.get_event_loop_policy().get_event_loop()
    loop.close()
    asyncio.set_event_loop(None)


@pytest.mark.usefixtures("sync_runs")
def test_run_sync_with_the_sync_load(url: str) -> None:
    history = CompactingHistory(url, context_window=100_000)
    agent = make_agent(Script(), [])
    for k in range(2):
        result = agent.run_sync(prompt(k), message_history=history.load_sync("fixer"))
        assert history.record("fixer", result.new_messages()) == 4
    loaded = history.load_sync("fixer")
    assert [m.kind for m in loaded] == ["request", "response", "request", "response"] * 2
    first = loaded[0].parts[0]
    assert isinstance(first, UserPromptPart) and first.content == prompt(0)
    assert isinstance(loaded[2].parts[0], ToolReturnPart)
