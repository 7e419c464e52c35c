"""A framework's own model as the summarizer (LangChain chat model, pydantic-ai model, Agents SDK
model): sent the span and the instruction, its answer recorded with its provider and model, and
held to completion and the fidelity gate like any summarizer (scenario 9's summarizer half)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.integrations.support import FILE, audit_passes, require_framework

require_framework("agents", "openai-agents")
require_framework("pydantic_ai", "pydantic-ai")
require_framework("langchain.agents", "langchain")

from agents.items import ModelResponse  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from agents.usage import Usage  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from openai.types.responses import ResponseOutputMessage, ResponseOutputText  # noqa: E402
from pydantic_ai.messages import ModelMessage, TextPart  # noqa: E402
from pydantic_ai.messages import ModelResponse as PaiResponse  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

from compaction.errors import EmptySummaryError  # noqa: E402
from compaction.integrations.memory import AssistantItem, ResultItem, UserItem  # noqa: E402
from compaction.integrations.openai_agents import CompactingSession  # noqa: E402
from compaction.integrations.summarizers import (  # noqa: E402
    AgentsModelSummarizer,
    LangChainSummarizer,
    PydanticAISummarizer,
)
from compaction.sessions.blocks import Message, Source, TextBlock, ToolCallBlock  # noqa: E402
from compaction.vocabulary.instruction import SECTIONS  # noqa: E402
from compaction.vocabulary.summarizer import SummaryRequest  # noqa: E402

IDENTIFIER = re.compile(r"[A-Za-z_][\w./-]*[._/][\w./-]+")


def handover(prompt: str) -> str:
    """What a careful model writes: every section, the identifiers of the span kept verbatim."""
    kept = sorted(set(IDENTIFIER.findall(prompt)))
    body = dict.fromkeys(SECTIONS, "(none)")
    body[SECTIONS[0]] = "fix the discount bug"
    body["Files and Code"] = "\n".join(f"- {k}" for k in kept) or "(none)"
    return "\n\n".join(f"## {section}\n{text}" for section, text in body.items())


class HandoverChatModel(GenericFakeChatModel):
    sent: list[list[BaseMessage]] = []  # noqa: RUF012 - a pydantic field, one list per instance
    careless: bool = False

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.sent.append(list(messages))
        text = "looks fine" if self.careless else handover(str(messages[-1].content))
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])


class HandoverAgentsModel(Model):
    def __init__(self, text: str | None = None) -> None:
        self.text = text
        self.inputs: list[Any] = []

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        self.inputs.append(input)
        prompt = input[-1]["content"]
        out = ResponseOutputText(
            type="output_text", text=self.text if self.text is not None else handover(prompt), annotations=[]
        )
        message = ResponseOutputMessage(
            id="msg_s", type="message", role="assistant", status="completed", content=[out]
        )
        return ModelResponse(
            output=[message], usage=Usage(input_tokens=100, output_tokens=20), response_id=None
        )

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def request() -> SummaryRequest:
    source = Source(kind="model", provider="p", model="m")
    messages = (
        Message(id="u1", role="user", content=(TextBlock(f"fix {FILE}"),)),
        Message(
            id="a1",
            role="assistant",
            content=(ToolCallBlock("c1", "read_file", json.dumps({"path": FILE})),),
            source=source,
        ),
    )
    return SummaryRequest(
        session_id="s", compaction_id="c", system="You fix bugs.", tools=(), messages=messages,
        instruction="Summarize the conversation.", max_tokens=500,
    )  # fmt: skip


async def test_each_framework_model_summarizes_a_request() -> None:
    chat = HandoverChatModel(messages=iter(()), sent=[])
    seen: list[list[ModelMessage]] = []

    def pai(messages: list[ModelMessage], info: AgentInfo) -> PaiResponse:
        seen.append(messages)
        return PaiResponse(parts=[TextPart(handover(str(messages[-1].parts[-1].content)))])

    agents_model = HandoverAgentsModel()
    for summarizer, provider in [
        (LangChainSummarizer(chat), "langchain"),
        (PydanticAISummarizer(FunctionModel(pai)), "pydantic-ai"),
        (AgentsModelSummarizer(agents_model, name="offline"), "openai-agents"),
    ]:
        output = await summarizer.summarize(request())
        assert output.provider == provider and FILE in output.text and "## Errors and Fixes" in output.text
    assert (
        "Summarize the conversation." in str(chat.sent[0][-1].content)
        and chat.sent[0][0].content == "You fix bugs."
    )
    assert FILE in str(seen[0][-1].parts[-1].content)
    assert "read_file" in agents_model.inputs[0][-1]["content"]


async def test_an_empty_answer_is_a_summarizer_error() -> None:
    with pytest.raises(EmptySummaryError, match="no text"):
        await AgentsModelSummarizer(HandoverAgentsModel(text="  ")).summarize(request())


async def conversation(session: CompactingSession) -> None:
    for k in range(8):
        source = Source(kind="model", provider="openai-agents", model="offline")
        arguments = json.dumps({"path": FILE})
        call = Message(
            id=f"a{k}",
            role="assistant",
            content=(ToolCallBlock(f"c{k}", "read_file", arguments),),
            source=source,
        )
        text = "\n".join(f"{i:4}  total += price * qty  # {FILE} line {i}" for i in range(60))
        answer = Message(
            id=f"b{k}", role="assistant", content=(TextBlock(f"answer {k}"),), source=call.source
        )
        await session.memory.record(
            "fixer",
            [UserItem(Message(id=f"u{k}", role="user", content=(TextBlock(f"task {k}: fix {FILE}"),))),
             AssistantItem(call), ResultItem(f"c{k}", (TextBlock(text),), f"r{k}"), AssistantItem(answer)],
            origin=f"turn {k}",
        )  # fmt: skip
        await session.get_items()


async def test_the_framework_model_compacts_a_session_through_the_gate(url: str) -> None:
    chat = HandoverChatModel(messages=iter(()), sent=[])
    session = CompactingSession("fixer", url, context_window=6000, summarizer=LangChainSummarizer(chat))
    await conversation(session)
    assert session.memory.compactions and chat.sent, "the chat model wrote the summaries"
    compactions = audit_passes(url)
    assert compactions and all(c["outcome"] == "committed" for c in compactions)
    logged = await session.memory.load("fixer")
    summaries = [e for e in logged.events() if e.type == "compact/summary"]
    assert summaries and all(e.provider == "langchain" for e in summaries)


async def test_a_careless_summary_goes_through_completion_and_the_gate(url: str) -> None:
    """The model's answer lacks every section: the library completes it (its sections filled from
    the log) before the gate measures it, and records that it did."""
    chat = HandoverChatModel(messages=iter(()), sent=[], careless=True)
    session = CompactingSession("fixer", url, context_window=6000, summarizer=LangChainSummarizer(chat))
    await conversation(session)
    assert chat.sent, "the chat model was asked"
    logged = await session.memory.load("fixer")
    summaries = [e for e in logged.events() if e.type == "compact/summary"]
    ends = [e for e in logged.events() if e.type == "compact/end"]
    assert summaries or any(e.error for e in ends), "either committed after completion or refused"
    for summary in summaries:
        assert summary.provider == "langchain" and summary.completion is not None
        assert summary.fidelity is not None and not summary.fidelity.sections_missing
        assert "looks fine" in summary.summary[0].text
    audit_passes(url)
