"""Every content part round-trips through the log, and items the library does not interpret are
kept opaquely: returned unchanged, counted by the meter, in their model response (scenarios 2 and
6 of the adapters' backend use)."""

from __future__ import annotations

import base64
import json
from typing import Any

from tests.integrations.support import audit_passes, require_framework

require_framework("agents", "openai-agents")
require_framework("pydantic_ai", "pydantic-ai")
require_framework("langchain.agents", "langchain")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    BinaryContent,
    DocumentUrl,
    ImageUrl,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserPromptPart,
)

from compaction.engine.meters import HeuristicMeter  # noqa: E402
from compaction.integrations.langchain import CompactionMiddleware, from_langchain, to_langchain  # noqa: E402
from compaction.integrations.openai_agents import CompactingSession  # noqa: E402
from compaction.integrations.pydantic_ai import CompactingHistory  # noqa: E402
from compaction.sessions.blocks import ImageBlock, OpaqueBlock  # noqa: E402

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
URL = "https://example.com/cart-screenshot.png"


def blocks_of(session: Any, kind: type) -> list[Any]:
    return [
        b
        for e in session.events()
        if (m := getattr(e, "message", None))
        for b in m.content
        if isinstance(b, kind)
    ]


async def test_agents_sdk_images_and_files_round_trip(url: str) -> None:
    session = CompactingSession("fixer", url, context_window=100_000)
    data_url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    message = {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "the cart looks wrong"},
            {"type": "input_image", "image_url": URL, "detail": "high"},
            {"type": "input_image", "image_url": data_url, "detail": "auto"},
            {
                "type": "input_file",
                "file_data": "data:application/pdf;base64,JVBERi0=",
                "filename": "cart.pdf",
            },
        ],
    }
    await session.add_items([message])
    assert await session.get_items() == [message]
    logged = await session.memory.load("fixer")
    images = blocks_of(logged, ImageBlock)
    assert [i.url for i in images] == [URL, data_url] and images[1].media_type == "image/png"


async def test_agents_sdk_items_it_does_not_interpret_come_back_unchanged(url: str) -> None:
    session = CompactingSession("fixer", url, context_window=100_000)
    reasoning = {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "search"}],
                 "encrypted_content": "gAAAAB" + "x" * 4000}  # fmt: skip
    search = {"id": "ws_1", "type": "web_search_call", "status": "completed",
              "action": {"type": "search", "query": "python rounding half even"}}  # fmt: skip
    answer = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
              "content": [{"type": "output_text", "text": "use Decimal", "annotations": []}]}  # fmt: skip
    items = [{"content": "why is the total off by a cent?", "role": "user"}, reasoning, search, answer]
    await session.add_items(items)
    assert await session.get_items() == items
    logged = await session.memory.load("fixer")
    opaque = blocks_of(logged, OpaqueBlock)
    assert [b.kind for b in opaque] == ["reasoning", "web_search_call"]
    assert "python rounding half even" in opaque[1].text
    meter = HeuristicMeter()
    assert meter.block(opaque[0]) > 1000, "the encrypted content is counted"
    [assistant] = [e.message for e in logged.events() if e.type == "assistant/message"]
    assert len(assistant.content) == 3, (
        "one model response: the reasoning, the search and the answer together"
    )
    audit_passes(url)


async def test_agents_sdk_opaque_items_survive_compaction_in_the_log(url: str) -> None:
    session = CompactingSession("fixer", url, context_window=3000)
    for k in range(6):
        search = {"id": f"ws_{k}", "type": "web_search_call", "status": "completed",
                  "action": {"type": "search", "query": f"query {k}"}}  # fmt: skip
        answer = {"id": f"msg_{k}", "type": "message", "role": "assistant", "status": "completed",
                  "content": [{"type": "output_text", "text": "x" * 1500, "annotations": []}]}  # fmt: skip
        await session.add_items([{"content": f"question {k}", "role": "user"}, search, answer])
        items = await session.get_items()
        assert all(
            i["id"] in {f"ws_{j}" for j in range(6)} for i in items if i.get("type") == "web_search_call"
        )
    assert session.memory.compactions
    logged = await session.memory.load("fixer")
    assert len(blocks_of(logged, OpaqueBlock)) == 6, "compaction shadows; the log keeps every opaque item"
    audit_passes(url)


async def test_pydantic_ai_images_documents_and_builtin_parts_round_trip(url: str) -> None:
    from pydantic_ai.messages import NativeToolCallPart, NativeToolReturnPart

    history = CompactingHistory(url, context_window=100_000)
    prompt = UserPromptPart(
        [
            "the cart looks wrong",
            ImageUrl(URL),
            BinaryContent(PNG, media_type="image/png"),
            DocumentUrl("https://example.com/spec.pdf"),
        ]
    )
    call = NativeToolCallPart("web_search", {"query": "rounding"}, tool_call_id="bt1", provider_name="openai")
    ret = NativeToolReturnPart(
        "web_search", {"results": ["decimal docs"]}, tool_call_id="bt1", provider_name="openai"
    )
    messages = [ModelRequest(parts=[prompt]), ModelResponse(parts=[call, ret, TextPart("use Decimal")])]
    assert history.record("fixer", messages) == 2
    loaded = await history.load("fixer")
    assert loaded[0].parts[0].content == prompt.content
    assert loaded[1].parts[:2] == [call, ret]
    logged = await history.memory.load("fixer")
    assert len(blocks_of(logged, ImageBlock)) == 2 and len(blocks_of(logged, OpaqueBlock)) == 3
    assert history.record("fixer", loaded) == 0


def test_langchain_images_round_trip() -> None:
    content = [
        {"type": "text", "text": "the cart looks wrong"},
        {"type": "image_url", "image_url": {"url": URL}},
        {"type": "image", "base64": base64.b64encode(PNG).decode(), "mime_type": "image/png"},
    ]
    message = HumanMessage(content=content, id="h1")
    answer = AIMessage(content="use Decimal", id="a1")
    from compaction.integrations.memory import AssistantItem, UserItem

    items = [from_langchain(message), from_langchain(answer)]
    assert isinstance(items[0], UserItem) and isinstance(items[1], AssistantItem)
    back = to_langchain([items[0].message, items[1].message])
    assert back[0].content == content and back[0].id == "h1"
    assert json.dumps(back[1].content) == json.dumps("use Decimal")
    assert sum(isinstance(b, ImageBlock) for b in items[0].message.content) == 2


# ---------------------------------------------------------------- audio

WAV = b"RIFF" + (36 + 48_000).to_bytes(4, "little") + b"WAVEfmt " + bytes(48_020)
"""Half a second of 48 kB/s silence: enough bytes that pricing its base64 as text would show."""
AUDIO_URL = "https://example.com/voicemail.mp3"


def assert_priced_as_audio(block: OpaqueBlock, size: int) -> None:
    """The meter prices an audio part by its clip, far below the text of its base64."""
    meter = HeuristicMeter()
    assert block.media_type is not None and block.media_type.startswith("audio/"), block
    assert block.media_bytes == size and block.text.startswith("audio ("), block
    price = meter.block(block)
    if size:
        assert size // 1000 < price < meter.text_tokens(block.payload) // 10, (price, len(block.payload))
    else:
        assert price > meter.text_tokens(block.payload), "a clip by reference still costs its audio"


async def test_agents_sdk_audio_round_trips_priced_as_audio(url: str) -> None:
    session = CompactingSession("caller", url, context_window=100_000)
    message = {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "what does the customer say?"},
            {"type": "input_audio", "input_audio": {"data": base64.b64encode(WAV).decode(), "format": "wav"}},
        ],
    }
    await session.add_items([message])
    assert await session.get_items() == [message]
    session.memory.forget("caller")  # read back from the store, not the loaded session
    assert await session.get_items() == [message]
    [audio] = blocks_of(await session.memory.load("caller"), OpaqueBlock)
    assert audio.kind == "input_audio" and audio.media_type == "audio/wav"
    assert_priced_as_audio(audio, len(WAV))
    audit_passes(url)


async def test_pydantic_ai_audio_round_trips_priced_as_audio(url: str) -> None:
    from pydantic_ai.messages import AudioUrl, FilePart

    history = CompactingHistory(url, context_window=100_000)
    stream = AudioUrl("https://example.com/live/stream")  # no extension: pydantic-ai cannot tell its type
    clip = BinaryContent(WAV, media_type="audio/wav")
    prompt = UserPromptPart(["transcribe these", AudioUrl(AUDIO_URL), clip, stream])
    spoken = FilePart(content=BinaryContent(WAV, media_type="audio/wav"))
    messages = [ModelRequest(parts=[prompt]), ModelResponse(parts=[TextPart("here is the reply"), spoken])]
    assert history.record("caller", messages) == 2
    history.memory.forget("caller")
    loaded = await history.load("caller")
    assert loaded[0].parts[0].content == prompt.content
    assert loaded[1].parts == messages[1].parts
    assert history.record("caller", loaded) == 0, "what was read back is known as recorded"
    by_reference, inline, streamed, answered = blocks_of(await history.memory.load("caller"), OpaqueBlock)
    assert_priced_as_audio(by_reference, 0)
    assert AUDIO_URL in by_reference.text and by_reference.media_type == "audio/mpeg"
    assert_priced_as_audio(streamed, 0)
    assert streamed.media_type == "audio/*"
    assert_priced_as_audio(inline, len(WAV))
    assert_priced_as_audio(answered, len(WAV))
    audit_passes(url)


def test_langchain_audio_round_trips_priced_as_audio(url: str) -> None:
    from compaction.integrations.memory import CompactingMemory

    data = base64.b64encode(WAV).decode()
    content = [
        {"type": "text", "text": "what does the customer say?"},
        {"type": "audio", "base64": data, "mime_type": "audio/wav"},
        {"type": "audio", "url": AUDIO_URL, "mime_type": "audio/mpeg"},
        {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}},
    ]
    message = HumanMessage(content=content, id="h1")
    memory = CompactingMemory(url, context_window=100_000, framework="langchain")
    memory.record_sync("caller", [from_langchain(message)], origin="test")
    memory.forget("caller")
    [back] = to_langchain(memory.surface_sync("caller"))
    assert back.content == content and back.id == "h1"
    inline, by_reference, openai_shape = blocks_of(memory.load_sync("caller"), OpaqueBlock)
    assert_priced_as_audio(inline, len(WAV))
    assert_priced_as_audio(by_reference, 0)
    assert openai_shape.kind == "input_audio"
    assert_priced_as_audio(openai_shape, len(WAV))
    memory.close()
    audit_passes(url)


# ---------------------------------------------------------------- LangChain content-block lists

THINKING = {
    "type": "thinking",
    "thinking": "the rounding is in cart.py",
    "signature": "EqQBCkgIARABGAIiQ" * 20,
}
TOOL_USE = {"type": "tool_use", "id": "toolu_01", "name": "read_file", "input": {"path": "src/shop/cart.py"}}
REASONING = {
    "type": "reasoning",
    "id": "rs_9",
    "summary": [{"type": "summary_text", "text": "Decimal fixes it"}],
    "encrypted_content": "gAAAAB" + "y" * 3000,
}


class BlockModel(GenericFakeChatModel):
    """An Anthropic-shaped model: thinks, says a word and calls ``read_file`` in one list of
    content blocks, then answers with a reasoning block (OpenAI Responses' shape) and text."""

    calls: int = 0

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.calls += 1
        if self.calls == 1:
            call = {"name": "read_file", "args": TOOL_USE["input"], "id": "toolu_01", "type": "tool_call"}
            content: list[Any] = [THINKING, {"type": "text", "text": "Let me read it."}, TOOL_USE]
            message = AIMessage(content=content, tool_calls=[call])
        else:
            message = AIMessage(content=[REASONING, {"type": "text", "text": "Use Decimal."}])
        return ChatResult(generations=[ChatGeneration(message=message)])


@tool
def read_file(path: str) -> str:
    """Read a file of the workspace."""
    return f"{path}: total = round(price * qty, 2)"


def test_langchain_content_block_lists_are_kept_block_by_block(url: str) -> None:
    middleware = CompactionMiddleware(url, context_window=100_000)
    agent = create_agent(
        BlockModel(messages=iter(())),
        tools=[read_file],
        middleware=[middleware],
        checkpointer=InMemorySaver(),
    )
    state = agent.invoke(
        {"messages": [{"role": "user", "content": "why is the total off by a cent?"}]},
        {"configurable": {"thread_id": "blocks"}},
    )
    answers = [m for m in state["messages"] if isinstance(m, AIMessage)]
    assert [m.content for m in answers] == [
        [THINKING, {"type": "text", "text": "Let me read it."}, TOOL_USE],
        [REASONING, {"type": "text", "text": "Use Decimal."}],
    ]
    middleware.memory.forget("blocks")
    back = [m for m in to_langchain(middleware.memory.surface_sync("blocks")) if isinstance(m, AIMessage)]
    assert [m.content for m in back] == [m.content for m in answers], "the same lists on reading"
    assert [m.id for m in back] == [m.id for m in answers]
    assert back[0].tool_calls == answers[0].tool_calls
    logged = middleware.memory.load_sync("blocks")
    [first, second] = [e.message for e in logged.events() if e.type == "assistant/message"]
    assert [type(b).__name__ for b in first.content] == [
        "OpaqueBlock",
        "TextBlock",
        "OpaqueBlock",
        "ToolCallBlock",
    ]
    assert [b.kind for b in first.content if isinstance(b, OpaqueBlock)] == ["thinking", "tool_use"]
    assert "toolu_01" in first.content[2].payload and "cart.py" not in first.content[2].payload, (
        "the tool_use block's arguments are the call's: priced once"
    )
    assert [type(b).__name__ for b in second.content] == ["OpaqueBlock", "TextBlock"]
    assert second.content[0].text == "Decimal fixes it"
    assert HeuristicMeter().block(second.content[0]) > 700, "the encrypted reasoning is counted"
    middleware.close()
    audit_passes(url)
