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

from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
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
from compaction.integrations.langchain import from_langchain, to_langchain  # noqa: E402
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
