"""Tool results that carry images, files and audio round-trip through the log in each framework:
recorded as a tool result whose parts are image and opaque blocks (priced like the same part in a
user message), read back as the framework's own objects, sent to the model after a reload, and
kept with their call through a compaction."""

from __future__ import annotations

import base64
import itertools
import json
from typing import Any

from tests.integrations.support import (
    audit_passes,
    every_call_answered_in_order,
    require_framework,
    surface_here,
)

require_framework("agents", "openai-agents")
require_framework("pydantic_ai", "pydantic-ai")
require_framework("langchain.agents", "langchain")

from agents import Agent, ToolOutputFileContent, ToolOutputImage, ToolOutputText, function_tool  # noqa: E402
from agents.items import ModelResponse  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from agents.usage import Usage  # noqa: E402
from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText  # noqa: E402
from pydantic import Field  # noqa: E402
from pydantic_ai import Agent as PaiAgent  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    BinaryContent,
    DocumentUrl,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.messages import ModelResponse as PaiResponse  # noqa: E402
from pydantic_ai.messages import TextPart as PaiText  # noqa: E402
from pydantic_ai.messages import ToolCallPart as PaiCall  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

from compaction.engine.meters import HeuristicMeter  # noqa: E402
from compaction.integrations.langchain import CompactionMiddleware, from_langchain, to_langchain  # noqa: E402
from compaction.integrations.memory import ResultItem, UserItem  # noqa: E402
from compaction.integrations.openai_agents import CompactingSession, from_items  # noqa: E402
from compaction.integrations.pydantic_ai import CompactingHistory, from_model_message  # noqa: E402
from compaction.sessions.blocks import ImageBlock, OpaqueBlock, TextBlock, ToolResultBlock  # noqa: E402

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
PNG_B64 = base64.b64encode(PNG).decode()
URL = "https://example.com/cart-screenshot.png"
PDF = "data:application/pdf;base64,JVBERi0xLjQK" + "A" * 400
WAV = b"RIFF" + (36 + 48_000).to_bytes(4, "little") + b"WAVEfmt " + bytes(48_020)
LONG = "x" * 6000
"""A tool's long text: a few runs of it put the session over a small window."""


def results(session: Any) -> list[ToolResultBlock]:
    """The tool-result blocks of the log, in order."""
    return [
        b
        for e in session.events()
        if e.type == "tool/result"
        for b in e.message.content
        if isinstance(b, ToolResultBlock)
    ]


def priced_as_elsewhere(result: ToolResultBlock, user_blocks: tuple[Any, ...]) -> None:
    """Each part of ``result`` is the block the same part makes in a user message, so the meter
    prices it alike; the result costs at least its parts."""
    assert result.content == user_blocks, (result.content, user_blocks)
    meter = HeuristicMeter()
    assert meter.block(result) >= sum(meter.block(b) for b in user_blocks)


# ---------------------------------------------------------------- OpenAI Agents SDK


CALL_IDS = itertools.count(1)
"""Scripted call ids, unique across runs of a conversation as a provider's are (a repeated id on
the surface fails the audit's unique-call-ids check)."""


class CallingModel(Model):
    """Each run: calls ``screenshot`` and ``spec`` together, then answers; keeps every input."""

    def __init__(self) -> None:
        self.inputs: list[list[dict[str, Any]]] = []

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        sent = (
            json.loads(json.dumps(input)) if isinstance(input, list) else [{"content": input, "role": "user"}]
        )
        self.inputs.append(sent)
        n = len(self.inputs)
        if sent[-1].get("type") != "function_call_output":
            calls = [
                ResponseFunctionToolCall(
                    id=f"fc_{name}_{n}",
                    call_id=f"{name}-{next(CALL_IDS)}",  # unique across runs, as a provider's are
                    type="function_call",
                    name=name,
                    arguments="{}",
                    status="completed",
                )
                for name in ("screenshot", "spec")
            ]
            return ModelResponse(output=list(calls), usage=Usage(), response_id=None)
        text = ResponseOutputText(type="output_text", text=f"answer {n}", annotations=[])
        message = ResponseOutputMessage(
            id=f"msg_{n}", type="message", role="assistant", status="completed", content=[text]
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the tests run the SDK without streaming")


@function_tool
def screenshot() -> list[ToolOutputText | ToolOutputImage]:
    """A screenshot of the cart, by URL and inline."""
    return [
        ToolOutputText(text="the cart " + LONG),
        ToolOutputImage(image_url=URL, detail="high"),
        ToolOutputImage(image_url=f"data:image/png;base64,{PNG_B64}"),
    ]


@function_tool
def spec() -> ToolOutputFileContent:
    """The cart's specification, a PDF."""
    return ToolOutputFileContent(file_data=PDF, filename="cart.pdf")


def outputs(items: list[dict[str, Any]]) -> list[Any]:
    return [i["output"] for i in items if i.get("type") == "function_call_output"]


async def test_agents_sdk_tool_results_with_images_and_files_round_trip(url: str) -> None:
    model = CallingModel()
    agent = Agent(name="fixer", model=model, tools=[screenshot, spec])
    session = CompactingSession("fixer", url, context_window=100_000)
    await session.run(agent, "the cart looks wrong")
    sent = outputs(model.inputs[1])
    assert [type(o) for o in sent] == [list, list] and sent[0][1]["type"] == "input_image"
    session.memory.forget("fixer")
    assert outputs(await session.get_items()) == sent, "read back as the SDK sent them"

    logged = await session.memory.load("fixer")
    shot, pdf = results(logged)
    [user] = from_items([{"role": "user", "content": sent[0]}], "probe")
    assert isinstance(user, UserItem)
    priced_as_elsewhere(shot, user.message.content)
    assert [type(b) for b in shot.content] == [TextBlock, ImageBlock, ImageBlock]
    assert shot.content[2].media_type == "image/png"
    [file] = pdf.content
    assert isinstance(file, OpaqueBlock) and file.kind == "input_file" and file.text == "cart.pdf"

    again = CallingModel()
    reloaded = CompactingSession("fixer", url, context_window=100_000)
    await reloaded.run(Agent(name="fixer", model=again, tools=[screenshot, spec]), "and now?")
    assert outputs(again.inputs[0]) == sent, "the model request after a reload holds the parts"
    audit_passes(url)


async def test_agents_sdk_compaction_keeps_image_results_with_their_calls(url: str) -> None:
    model = CallingModel()
    agent = Agent(name="fixer", model=model, tools=[screenshot, spec])
    session = CompactingSession("fixer", url, context_window=6000)
    for k in range(4):
        await session.run(agent, f"question {k}")
    assert session.memory.compactions, "the runs outgrew the window"
    items = await session.get_items()
    calls = {i["call_id"] for i in items if i.get("type") == "function_call"}
    answered = {i["call_id"] for i in items if i.get("type") == "function_call_output"}
    assert calls == answered and calls, "no result split from its call"
    assert any(isinstance(o, list) and o[1]["type"] == "input_image" for o in outputs(items))
    logged = await session.memory.load("fixer")
    every_call_answered_in_order(surface_here(url, logged.id))
    assert len(results(logged)) == 8 > len(outputs(items)), "shadowed from the surface, kept in the log"
    assert audit_passes(url), "a compaction over the results committed and re-checks"


# ---------------------------------------------------------------- pydantic-ai


def pai_script(messages: list[ModelMessage], info: AgentInfo) -> PaiResponse:
    last = messages[-1].parts[-1]
    if isinstance(last, UserPromptPart) and isinstance(last.content, str):
        n = next(CALL_IDS)  # call ids unique across runs, as a provider's are
        return PaiResponse(parts=[PaiCall("screenshot", {}, tool_call_id=f"s{n}"),
                                  PaiCall("spec", {}, tool_call_id=f"d{n}"),
                                  PaiCall("voicemail", {}, tool_call_id=f"v{n}")])  # fmt: skip
    return PaiResponse(parts=[PaiText(f"answer {len(messages)}")])


def pai_agent(seen: list[list[ModelMessage]]) -> PaiAgent[None, str]:
    def model(messages: list[ModelMessage], info: AgentInfo) -> PaiResponse:
        seen.append(list(messages))
        return pai_script(messages, info)

    agent: PaiAgent[None, str] = PaiAgent(FunctionModel(model))

    @agent.tool_plain
    def screenshot() -> list[Any]:
        """A screenshot of the cart, by URL and inline."""
        return ["the cart " + LONG, ImageUrl(URL), BinaryContent(PNG, media_type="image/png")]

    @agent.tool_plain
    def spec() -> DocumentUrl:
        """The cart's specification."""
        return DocumentUrl("https://example.com/spec.pdf")

    @agent.tool_plain
    def voicemail() -> BinaryContent:
        """The customer's voicemail."""
        return BinaryContent(WAV, media_type="audio/wav")

    return agent


def tool_returns(messages: list[ModelMessage]) -> list[Any]:
    return [
        p.content
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    ]


async def test_pydantic_ai_tool_returns_with_images_documents_and_audio_round_trip(url: str) -> None:
    seen: list[list[ModelMessage]] = []
    history = CompactingHistory(url, context_window=100_000)
    result = await pai_agent(seen).run("the cart looks wrong", capabilities=[history.capability("fixer")])
    sent = tool_returns(seen[-1])
    assert (
        isinstance(sent[0], list) and isinstance(sent[1], DocumentUrl) and isinstance(sent[2], BinaryContent)
    )
    assert tool_returns(result.all_messages()) == sent
    history.memory.forget("fixer")
    assert tool_returns(await history.load("fixer")) == sent, "read back as pydantic-ai's own objects"

    logged = await history.memory.load("fixer")
    shot, doc, clip = results(logged)
    [user] = from_model_message(ModelRequest(parts=[UserPromptPart(sent[0])]))
    assert isinstance(user, UserItem)
    priced_as_elsewhere(shot, user.message.content)
    assert [type(b) for b in shot.content] == [TextBlock, ImageBlock, ImageBlock]
    assert isinstance(doc.content[0], OpaqueBlock) and doc.content[0].kind == "document-url"
    [audio] = clip.content
    assert (
        isinstance(audio, OpaqueBlock) and audio.media_type == "audio/wav" and audio.media_bytes == len(WAV)
    )

    again: list[list[ModelMessage]] = []
    await pai_agent(again).run(
        "and now?", capabilities=[CompactingHistory(url, context_window=100_000).capability("fixer")]
    )
    assert tool_returns(again[0])[:3] == sent, "the model request after a reload holds the parts"
    assert history.record("fixer", await history.load("fixer")) == 0
    audit_passes(url)


async def test_pydantic_ai_compaction_keeps_file_returns_with_their_calls(url: str) -> None:
    history = CompactingHistory(url, context_window=6000)
    seen: list[list[ModelMessage]] = []
    for k in range(4):
        await pai_agent(seen).run(f"question {k}", capabilities=[history.capability("fixer")])
    assert history.memory.compactions, "the runs outgrew the window"
    loaded = await history.load("fixer")
    calls = {
        p.tool_call_id
        for m in loaded
        if isinstance(m, PaiResponse)
        for p in m.parts
        if isinstance(p, PaiCall)
    }
    returned = {p.tool_call_id for m in loaded for p in m.parts if isinstance(p, ToolReturnPart)}
    assert calls == returned and calls, "no return split from its call"
    assert any(isinstance(c, list) and isinstance(c[1], ImageUrl) for c in tool_returns(loaded))
    logged = await history.memory.load("fixer")
    every_call_answered_in_order(surface_here(url, logged.id))
    assert len(results(logged)) == 12 > len(tool_returns(loaded)), (
        "shadowed from the surface, kept in the log"
    )
    assert audit_passes(url), "a compaction over the results committed and re-checks"


# ---------------------------------------------------------------- LangChain

AUDIO = {"type": "audio", "base64": base64.b64encode(WAV).decode(), "mime_type": "audio/wav"}
FILE = {"type": "file", "url": "https://example.com/spec.pdf", "mime_type": "application/pdf"}


@tool
def lc_screenshot() -> list[dict[str, Any]]:
    """A screenshot of the cart, by URL and inline, and the spec."""
    return [
        {"type": "text", "text": "the cart " + LONG},
        {"type": "image_url", "image_url": {"url": URL}},
        {"type": "image", "base64": PNG_B64, "mime_type": "image/png"},
        FILE,
    ]


class ToolCallingModel(GenericFakeChatModel):
    """Calls the screenshot tool twice after each human message, then answers; keeps every request."""

    seen: list[list[Any]] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.seen.append(list(messages))
        n = len(self.seen)
        if messages[-1].type == "human":
            calls = [
                {"name": "lc_screenshot", "args": {}, "id": f"shot-{next(CALL_IDS)}-{k}", "type": "tool_call"}
                for k in range(2)
            ]
            message = AIMessage(content="", tool_calls=calls)
        else:
            message = AIMessage(content=f"answer {n}")
        return ChatResult(generations=[ChatGeneration(message=message)])


def lc_agent(model: ToolCallingModel, middleware: CompactionMiddleware) -> Any:
    return create_agent(model, tools=[lc_screenshot], middleware=[middleware], checkpointer=InMemorySaver())


def tool_contents(messages: list[Any]) -> list[Any]:
    return [m.content for m in messages if isinstance(m, ToolMessage)]


def test_langchain_tool_messages_with_images_files_and_audio_round_trip(url: str) -> None:
    model = ToolCallingModel(messages=iter(()))
    middleware = CompactionMiddleware(url, context_window=100_000)
    config = {"configurable": {"thread_id": "fixer"}}
    lc_agent(model, middleware).invoke(
        {"messages": [{"role": "user", "content": "the cart looks wrong"}]}, config
    )
    sent = tool_contents(model.seen[-1])
    assert sent[0][1] == {"type": "image_url", "image_url": {"url": URL}} and sent[0][3] == FILE
    middleware.memory.forget("fixer")
    back = to_langchain(middleware.memory.surface_sync("fixer"))
    assert tool_contents(back) == sent, "read back as LangChain's own blocks"
    assert [m.id for m in back if isinstance(m, ToolMessage)] == [
        m.id for m in model.seen[-1] if isinstance(m, ToolMessage)
    ]

    logged = middleware.memory.load_sync("fixer")
    shot, _ = results(logged)
    user = from_langchain(ToolMessage(content=sent[0], tool_call_id="probe", id="probe"))
    assert isinstance(user, ResultItem)
    priced_as_elsewhere(shot, user.content)
    assert [type(b) for b in shot.content] == [TextBlock, ImageBlock, ImageBlock, OpaqueBlock]
    assert isinstance(shot.content[3], OpaqueBlock) and shot.content[3].kind == "file"
    middleware.close()

    again = ToolCallingModel(messages=iter(()))
    fresh = CompactionMiddleware(url, context_window=100_000)
    lc_agent(again, fresh).invoke({"messages": [{"role": "user", "content": "and now?"}]}, config)
    assert tool_contents(again.seen[0]) == sent, "the model request after a reload holds the parts"
    fresh.close()
    audit_passes(url)


def test_langchain_tool_message_with_audio_round_trips_priced_as_audio(url: str) -> None:
    """A ``ToolMessage`` holding audio (the agent's tool node turns a tool's audio block into text,
    so the message is made here as an application that builds its own would)."""
    from compaction.integrations.memory import CompactingMemory

    call = AIMessage(
        content="", tool_calls=[{"name": "voicemail", "args": {}, "id": "v1", "type": "tool_call"}], id="a1"
    )
    content = [{"type": "text", "text": "voicemail"}, AUDIO]
    answer = ToolMessage(content=content, tool_call_id="v1", id="t1", name="voicemail")
    memory = CompactingMemory(url, context_window=100_000, framework="langchain")
    memory.record_sync("caller", [from_langchain(call), from_langchain(answer)], origin="test")
    memory.forget("caller")
    [_, back] = to_langchain(memory.surface_sync("caller"))
    assert isinstance(back, ToolMessage) and back.content == content and back.id == "t1"
    [clip] = results(memory.load_sync("caller"))
    audio = clip.content[1]
    assert (
        isinstance(audio, OpaqueBlock) and audio.media_type == "audio/wav" and audio.media_bytes == len(WAV)
    )
    meter = HeuristicMeter()
    assert meter.block(audio) < meter.text_tokens(audio.payload) // 10, "priced as audio, not as its base64"
    memory.close()
    audit_passes(url)


def test_langchain_compaction_keeps_image_results_with_their_calls(url: str) -> None:
    model = ToolCallingModel(messages=iter(()))
    middleware = CompactionMiddleware(url, context_window=6000)
    agent = lc_agent(model, middleware)
    config = {"configurable": {"thread_id": "fixer"}}
    for k in range(4):
        agent.invoke({"messages": [{"role": "user", "content": f"question {k}"}]}, config)
    assert middleware.memory.compactions, "the runs outgrew the window"
    surface = to_langchain(middleware.memory.surface_sync("fixer"))
    calls = {c["id"] for m in surface if isinstance(m, AIMessage) for c in m.tool_calls}
    answered = {m.tool_call_id for m in surface if isinstance(m, ToolMessage)}
    assert calls == answered, "no result split from its call"
    assert all(isinstance(c, list) and len(c) == 4 for c in tool_contents(surface))
    logged = middleware.memory.load_sync("fixer")
    every_call_answered_in_order(surface_here(url, logged.id))
    assert len(results(logged)) == 8 > len(tool_contents(surface)), (
        "shadowed from the surface, kept in the log"
    )
    middleware.close()
    assert audit_passes(url), "a compaction over the results committed and re-checks"
