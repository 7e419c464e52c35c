"""LangChain v1 ``create_agent`` with the compaction middleware and a fake chat model: every message
recorded, the state's messages replaced by the compacted surface (task first, tool pairs intact), the
audit passes, another process reads the same surface; sync and async agents alike."""

from __future__ import annotations

from typing import Any

from tests.integrations.support import (
    FILE,
    audit_passes,
    every_call_answered_in_order,
    prompt,
    require_framework,
    surface_here,
    surface_in_another_process,
)

require_framework("langchain.agents", "langchain")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.tools import tool  # noqa: E402

from compaction.integrations.langchain import CompactionMiddleware  # noqa: E402
from compaction.sessions.blocks import text_of  # noqa: E402


class ToolCallingFakeModel(GenericFakeChatModel):
    """Reads the file after a human message, answers after a tool message; keeps what it was sent."""

    sent: list[list[BaseMessage]] = []  # noqa: RUF012 - a pydantic field, one list per instance
    answers: list[str] = []  # noqa: RUF012

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.sent.append(list(messages))
        if isinstance(messages[-1], ToolMessage):
            self.answers.append(f"answer {len(self.sent)}: apply_discount lacks rounding")
            message = AIMessage(content=self.answers[-1])
        else:
            call = {
                "name": "read_file",
                "args": {"path": FILE},
                "id": f"call_{len(self.sent)}",
                "type": "tool_call",
            }
            message = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=message)])


@tool
def read_file(path: str) -> str:
    """Read a file of the workspace."""
    return f"{path}:\n" + "\n".join(f"{i:4}  total += price * qty  # line {i}" for i in range(60))


def check_run(url: str, middleware: CompactionMiddleware, model: ToolCallingFakeModel, turns: int) -> None:
    assert middleware.memory.compactions, "the run never compacted"
    sent = model.sent[-1]
    if isinstance(sent[0], SystemMessage):  # create_agent's system_prompt, prepended to every call
        sent = sent[1:]
    assert isinstance(sent[0], HumanMessage) and sent[0].content == prompt(0), "the task statement first"
    assert any(isinstance(m, HumanMessage) and "checkpoint" in str(m.content) for m in sent)
    assert len(sent) < 4 * turns, "the history sent is compacted"
    open_calls: set[str] = set()
    for message in sent:
        if isinstance(message, AIMessage):
            assert not open_calls
            open_calls = {c["id"] or "" for c in message.tool_calls}
        elif isinstance(message, ToolMessage):
            assert message.tool_call_id in open_calls, "a tool message follows its call"
            open_calls.discard(message.tool_call_id)
    session = middleware.memory.load_sync("fixer")
    logged = {text_of(m.content) for m in (getattr(e, "message", None) for e in session.events()) if m}
    assert {prompt(k) for k in range(turns)} | set(model.answers) <= logged, "the log keeps every message"
    assert len(model.answers) == turns
    compactions = audit_passes(url)
    assert compactions and all(c["outcome"] == "committed" for c in compactions)
    assert surface_in_another_process(url, session.id) == surface_here(url, session.id)
    every_call_answered_in_order(surface_here(url, session.id))


def test_a_multi_turn_run_is_compacted_kept_and_audited(url: str) -> None:
    middleware = CompactionMiddleware(url, thread="fixer", context_window=5000)
    model = ToolCallingFakeModel(messages=iter(()), sent=[], answers=[])
    agent = create_agent(model, tools=[read_file], system_prompt="You fix bugs.", middleware=[middleware])
    messages: list[Any] = []
    for k in range(9):
        state = agent.invoke({"messages": [*messages, {"role": "user", "content": prompt(k)}]})
        messages = state["messages"]
    check_run(url, middleware, model, 9)
    assert len(messages) < 4 * 9, "the agent's state holds the compacted surface"


async def test_the_async_agent_uses_the_same_middleware(url: str) -> None:
    middleware = CompactionMiddleware(url, thread="fixer", context_window=5000)
    model = ToolCallingFakeModel(messages=iter(()), sent=[], answers=[])
    agent = create_agent(model, tools=[read_file], middleware=[middleware])
    messages: list[Any] = []
    for k in range(9):
        state = await agent.ainvoke({"messages": [*messages, {"role": "user", "content": prompt(k)}]})
        messages = state["messages"]
    check_run(url, middleware, model, 9)


def test_a_system_message_in_the_state_is_recorded_once(url: str) -> None:
    middleware = CompactionMiddleware(url, thread="fixer", context_window=100_000)
    model = ToolCallingFakeModel(messages=iter(()), sent=[], answers=[])
    agent = create_agent(model, tools=[read_file], middleware=[middleware])
    messages: list[Any] = [SystemMessage(content="Answer briefly.")]
    for k in range(2):
        state = agent.invoke({"messages": [*messages, {"role": "user", "content": prompt(k)}]})
        messages = state["messages"]
    assert isinstance(model.sent[-1][0], SystemMessage) and model.sent[-1][0].content == "Answer briefly."
    session = middleware.memory.load_sync("fixer")
    assert session.type_counts["context/message"] == 1 and session.type_counts["user/message"] == 2
