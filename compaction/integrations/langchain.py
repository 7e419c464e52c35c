"""LangChain v1 agents: a middleware that keeps the conversation in a compacting event log
(extra ``langchain``).

    memory = CompactionMiddleware("user-42", "sqlite:///./.compaction/sessions.db", context_window=128_000)
    agent = create_agent(model, tools=[...], middleware=[memory])

Before every model call, :meth:`CompactionMiddleware.before_model` records the state's messages the
log does not hold yet (a ``HumanMessage`` opens a turn; an ``AIMessage`` is one step with its tool
calls; a ``ToolMessage`` answers its call; ``after_model`` records each answer as it arrives),
compacts when the session is over its threshold, and replaces the state's messages with the surface,
as LangChain's ``SummarizationMiddleware`` does, but with every original message kept in the log,
the task statement pinned first, tool pairs never split, and ``compaction audit`` able to re-check
every compaction. Messages are matched by their LangChain ``id`` (the surface hands them back with
the ids they were recorded under).

This module imports LangChain when it is imported; ``import compaction.integrations`` does not.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from compaction.errors import FrameworkMissingError, IntegrationError
from compaction.integrations.memory import (
    AssistantItem,
    CompactingMemory,
    ContextItem,
    Item,
    ResultItem,
    UserItem,
)
from compaction.service import BasicCompactService
from compaction.sessions.blocks import (
    Block,
    Message,
    ReasoningBlock,
    Source,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    text_of,
    tool_calls_of,
)
from compaction.sessions.store import SessionStore

try:
    from langchain.agents.middleware import AgentMiddleware, AgentState
    from langchain_core.messages import (
        AIMessage,
        AnyMessage,
        BaseMessage,
        HumanMessage,
        RemoveMessage,
        SystemMessage,
        ToolMessage,
    )
    from langgraph.graph.message import REMOVE_ALL_MESSAGES
    from langgraph.runtime import Runtime
except ImportError as e:  # pragma: no cover - exercised by a subprocess test without LangChain
    raise FrameworkMissingError(
        f"CompactionMiddleware needs LangChain v1: pip install 'event-compaction[langchain]' ({e})"
    ) from e

PROVIDER = "langchain"


class CompactionMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Records the agent's messages as events and hands the model the compacted surface."""

    def __init__(
        self,
        session_id: str,
        url: str | None = None,
        *,
        store: SessionStore | None = None,
        service: BasicCompactService | None = None,
        context_window: int | None = None,
        model: str = "unknown",
    ) -> None:
        super().__init__()
        self.session_id = session_id
        self.memory = CompactingMemory(
            url, store=store, service=service, context_window=context_window, provider=PROVIDER, model=model
        )

    def close(self) -> None:
        self.memory.close()

    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Record, compact, replace. Runs the compaction in its own event loop: use the agent's
        async API (``ainvoke``) when this thread already runs one."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.abefore_model(state, runtime))
        raise IntegrationError(
            f"session {self.session_id!r}: before_model was called inside a running event loop; "
            "expected the agent's async API (ainvoke/astream), which calls abefore_model"
        )

    async def abefore_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        self.record(state["messages"])
        surface = to_langchain(await self.memory.surface(self.session_id))
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *surface]}

    def after_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Record the model's answer right away, so the last answer of a run is in the log too."""
        self.record(state["messages"])
        return None

    async def aafter_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        self.record(state["messages"])
        return None

    def record(self, messages: Sequence[BaseMessage]) -> int:
        """Record the messages the log does not hold yet (by id), in order; returns how many."""
        session = self.memory.load(self.session_id)
        known = self.memory.recorded_ids(session)
        items = [from_langchain(m) for m in messages if not {m.id, f"system:{m.id}"} & known]
        if items:
            self.memory.record(self.session_id, items, origin="langchain state")
        return len(items)


# ---------------------------------------------------------------- LangChain -> items


def from_langchain(message: BaseMessage) -> Item:
    message_id = message.id or ""
    if not message_id:
        raise IntegrationError(f"expected a LangChain message with an id; found {message!r}")
    if isinstance(message, AIMessage):
        blocks: list[Block] = []
        if str(message.text):
            blocks.append(TextBlock(str(message.text)))
        for call in message.tool_calls:
            blocks.append(
                ToolCallBlock(id=call["id"] or "", name=call["name"], arguments=json.dumps(call["args"]))
            )
        model = str(message.response_metadata.get("model_name", "unknown"))
        source = Source(kind="model", provider=PROVIDER, model=model)
        return AssistantItem(Message(id=message_id, role="assistant", content=tuple(blocks), source=source))
    if isinstance(message, ToolMessage):
        return ResultItem(
            message.tool_call_id, (TextBlock(str(message.text)),), message_id, message.status == "error"
        )
    if isinstance(message, HumanMessage):
        return UserItem(Message(id=message_id, role="user", content=(TextBlock(str(message.text)),)))
    if isinstance(message, SystemMessage):
        return ContextItem(
            Message(id=f"system:{message_id}", role="user", content=(TextBlock(str(message.text)),))
        )
    raise IntegrationError(
        f"LangChain message {message_id}: expected a human, AI, tool or system message; "
        f"found {message.type!r}"
    )


# ---------------------------------------------------------------- surface -> LangChain


def to_langchain(messages: Sequence[Message]) -> list[AnyMessage]:
    """Surface messages as LangChain messages, under the ids they were recorded with."""
    names = {call.id: call.name for m in messages if m.role == "assistant" for call in tool_calls_of(m)}
    out: list[AnyMessage] = []
    for message in messages:
        if message.role == "assistant":
            calls = [
                {"name": b.name, "args": _arguments(b.arguments), "id": b.id, "type": "tool_call"}
                for b in message.content
                if isinstance(b, ToolCallBlock)
            ]
            text = "\n".join(b.text for b in message.content if isinstance(b, TextBlock))
            reasoning = [b.text for b in message.content if isinstance(b, ReasoningBlock)]
            extra = {"reasoning_content": "\n".join(reasoning)} if reasoning else {}
            out.append(AIMessage(content=text, tool_calls=calls, id=message.id, additional_kwargs=extra))
            continue
        result = next((b for b in message.content if isinstance(b, ToolResultBlock)), None)
        if result is not None:
            out.append(
                ToolMessage(
                    content=text_of(result.content),
                    tool_call_id=result.tool_call_id,
                    name=names.get(result.tool_call_id),
                    status="error" if result.is_error else "success",
                    id=message.id,
                )
            )
        elif message.id.startswith("system:"):
            out.append(SystemMessage(content=text_of(message.content), id=message.id.removeprefix("system:")))
        else:
            out.append(HumanMessage(content=text_of(message.content), id=message.id))
    return out


def _arguments(raw: str) -> dict[str, Any]:
    try:
        parsed = json.loads(raw) if raw else {}
    except ValueError:
        return {"arguments": raw}
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}
