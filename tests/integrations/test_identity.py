"""Whose conversation is it: each framework's own conversation id names the session, namespaced
per framework; LangGraph threads are isolated; a session one framework made is refused by another
unless asked for; the context window follows from a known model name (scenarios 1 and 9)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.integrations.support import require_framework

require_framework("agents", "openai-agents")
require_framework("pydantic_ai", "pydantic-ai")
require_framework("langchain.agents", "langchain")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

from compaction.errors import ForeignSessionError, IntegrationError  # noqa: E402
from compaction.integrations.langchain import CompactionMiddleware  # noqa: E402
from compaction.integrations.openai_agents import CompactingSession  # noqa: E402
from compaction.integrations.pydantic_ai import CompactingHistory  # noqa: E402
from compaction.sessions.store import SessionStore  # noqa: E402

CARD = "my card number is 4111 1111 1111 1111"


class EchoModel(GenericFakeChatModel):
    """Answers every request; keeps each request it was sent."""

    sent: list[list[BaseMessage]] = []  # noqa: RUF012 - a pydantic field, one list per instance

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.sent.append(list(messages))
        return ChatResult(
            generations=[ChatGeneration(message=AIMessage(content=f"noted ({len(self.sent)})"))]
        )


async def test_langgraph_threads_do_not_see_each_other(url: str) -> None:
    model = EchoModel(messages=iter(()), sent=[])
    middleware = CompactionMiddleware(url, context_window=100_000)
    agent = create_agent(model, middleware=[middleware], checkpointer=InMemorySaver())
    await agent.ainvoke(
        {"messages": [{"role": "user", "content": CARD}]}, {"configurable": {"thread_id": "t-1"}}
    )
    await agent.ainvoke(
        {"messages": [{"role": "user", "content": "hello"}]}, {"configurable": {"thread_id": "t-2"}}
    )
    await agent.ainvoke(
        {"messages": [{"role": "user", "content": "again"}]}, {"configurable": {"thread_id": "t-1"}}
    )
    assert all("4111" not in str(m.content) for m in model.sent[1]), "thread t-2 saw thread t-1"
    assert any("4111" in str(m.content) for m in model.sent[2]), "thread t-1 keeps its own history"
    memory = middleware.memory
    first, second = memory.session_id("t-1"), memory.session_id("t-2")
    assert first != second
    assert [m.role for m in (await memory.load("t-2")).derive_messages()] == ["user", "assistant"]


async def test_a_run_without_a_thread_is_refused_naming_the_setting(url: str) -> None:
    agent = create_agent(
        EchoModel(messages=iter(()), sent=[]), middleware=[CompactionMiddleware(url, context_window=100_000)]
    )
    with pytest.raises(IntegrationError, match="thread_id"):
        await agent.ainvoke({"messages": [{"role": "user", "content": "hi"}]})


async def test_one_key_in_two_frameworks_is_two_sessions(url: str) -> None:
    agents_session = CompactingSession("user-42", url, context_window=100_000)
    await agents_session.add_items([{"content": "an Agents SDK conversation", "role": "user"}])
    history = CompactingHistory(url, context_window=100_000)
    assert await history.load("user-42") == [], "pydantic-ai starts its own conversation"
    assert history.memory.session_id("user-42") != agents_session.memory.session_id("user-42")


async def test_a_session_of_another_framework_is_refused_unless_allowed(url: str) -> None:
    agents_session = CompactingSession("user-42", url, context_window=100_000)
    await agents_session.add_items(
        [
            {"content": "hi", "role": "user"},
            {"content": [{"annotations": [], "text": "hello", "type": "output_text"}], "id": "msg_1",
             "role": "assistant", "status": "completed", "type": "message"},
        ]
    )  # fmt: skip
    made = str(agents_session.memory.session_id("user-42"))
    history = CompactingHistory(url, context_window=100_000)
    with pytest.raises(
        ForeignSessionError, match=f"session {made}.*found one openai-agents made.*allow_foreign"
    ):
        await history.load(made)
    allowed = CompactingHistory(url, context_window=100_000, allow_foreign=True)
    assert [m.kind for m in await allowed.load(made)] == ["request", "response"]


def test_a_uuid_key_names_that_session(url: str) -> None:
    key = str(uuid.uuid4())
    history = CompactingHistory(url, context_window=100_000)
    history.record("ignored", [])
    from pydantic_ai.messages import ModelRequest, UserPromptPart

    history.record(key, [ModelRequest(parts=[UserPromptPart("hi")])])
    with SessionStore.open(url) as store:
        assert store.exists(uuid.UUID(key))


def test_the_window_follows_from_a_known_model_name(url: str) -> None:
    assert CompactingHistory(url, model="gpt-4o").memory.service.config.context_window == 128_000
    assert (
        CompactionMiddleware(url, model="claude-sonnet-4-5").memory.service.config.context_window == 200_000
    )
    assert CompactingSession("k", url, model="gpt-4.1-mini").memory.service.config.context_window == 1_047_576
    with pytest.raises(IntegrationError, match="found model 'my-finetune'"):
        CompactingHistory(url, model="my-finetune")
    assert (
        CompactingHistory(
            url, model="my-finetune", context_window=32_000
        ).memory.service.config.context_window
        == 32_000
    )
