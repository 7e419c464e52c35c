"""Chunking that fits a small server: units cut to the window (``elide``), the conversation's header
left out (``keep_header=False``), the window from the registry and the command line
(``--summarizer-window``), errors naming that flag, and the local summarizer's one connection per
request. Real HTTP through the aiohttp provider server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import msgspec
import pytest

from compaction.errors import CompactionConfigError, ContextLengthError
from compaction.sessions.blocks import Message, TextBlock, ToolCallBlock, ToolResultBlock
from compaction.summarizers.chunking import ChunkingSummarizer, elide_text, fit_unit, tool_units
from compaction.summarizers.local import LocalSummarizer, local_estimate
from compaction.summarizers.registry import SUMMARIZERS, SummarizerOptions
from tests.compaction.summarizers.provider_servers import OPENAI_CONTEXT_ERROR, ProviderServer, Reply
from tests.compaction.summarizers.test_http import (
    FAST,
    METER,
    chunk_replies,
    conversation,
    long_request,
    make_request,
    openai,
)


@pytest.fixture
async def server() -> AsyncIterator[ProviderServer]:
    provider = await ProviderServer().start()
    yield provider
    await provider.stop()


def test_elide_text_keeps_head_and_tail_and_says_how_much_went() -> None:
    text = "HEAD" + "x" * 5000 + "TAIL"
    cut = elide_text(text, 400)
    assert cut.startswith("HEAD") and cut.endswith("TAIL") and len(cut) < 500
    assert "[... 4608 characters elided to fit the summarizer window ...]" in cut
    assert elide_text("short", 10) == "short"


def test_fit_unit_cuts_results_and_arguments_but_keeps_the_pairing() -> None:
    call = ToolCallBlock("c1", "write", json.dumps({"path": "src/a.py", "content": "y" * 20000}))
    unit = (
        Message(id="a", role="assistant", content=(TextBlock("writing"), call)),
        Message(id="r", role="user", content=(ToolResultBlock("c1", (TextBlock("z" * 20000),)),)),
    )
    fitted = fit_unit(unit, 1000, METER.message)
    assert sum(METER.message(m) for m in fitted) <= 1000
    (text, cut_call), (result,) = fitted[0].content, fitted[1].content
    assert isinstance(cut_call, ToolCallBlock) and isinstance(result, ToolResultBlock)
    assert json.loads(cut_call.arguments)["path"] == "src/a.py"  # still valid JSON, path kept
    assert (cut_call.id, result.tool_call_id) == ("c1", "c1") and text == TextBlock("writing")
    assert tool_units(fitted) == [fitted]


async def test_an_unsplittable_unit_is_cut_to_fit_when_eliding(server: ProviderServer) -> None:
    request = long_request(steps=3, output_chars=8000)
    server.script(*chunk_replies([*(f"p{i}" for i in range(8)), "merged"]))
    chunker = ChunkingSummarizer(openai(server), 2000, METER.message, elide=True)
    async with chunker:
        output = await chunker.summarize(request)
    assert len(server.received) == output.chunks + 1 and output.chunks >= 3
    budget = chunker.budget(request)
    for received in server.received[:-1]:
        body = conversation(received.body)
        assert any("characters elided" in str(m.get("content")) for m in body)
        assert sum(len(json.dumps(m)) for m in body) // 4 <= budget * 1.2


async def test_without_eliding_the_error_names_the_flag(server: ProviderServer) -> None:
    request = long_request(steps=3, output_chars=8000)
    async with ChunkingSummarizer(openai(server), 2000, METER.message) as chunker:
        with pytest.raises(ContextLengthError, match=r"raise the summarizer window \(--summarizer-window N"):
            await chunker.summarize(request)
    async with ChunkingSummarizer(openai(server), 500, METER.message, elide=True) as chunker:
        with pytest.raises(ContextLengthError, match=r"leaves -\d+ for messages.*--summarizer-window N"):
            await chunker.summarize(make_request(max_tokens=400))
    assert server.received == []


async def test_a_single_unit_the_server_refuses_is_cut_further(server: ProviderServer) -> None:
    whole = long_request(steps=1, output_chars=6000)
    request = msgspec.structs.replace(whole, messages=whole.messages[1:])  # one unit: a call, its result
    server.script(Reply(status=400, body=OPENAI_CONTEXT_ERROR), *chunk_replies(["fits now"]))
    async with ChunkingSummarizer(openai(server), 100_000, METER.message, elide=True) as chunker:
        output = await chunker.summarize(request)
    assert output.text == "fits now" and len(server.received) == 2
    first, second = (json.dumps(conversation(r.body)) for r in server.received)
    assert "characters elided" in second and len(second) < len(first) * 0.8


async def test_the_header_can_be_left_out(server: ProviderServer) -> None:
    server.script(*chunk_replies(["whole"]))
    async with ChunkingSummarizer(openai(server), 100_000, METER.message, keep_header=False) as chunker:
        await chunker.summarize(make_request())
    (received,) = server.received
    assert "tools" not in received.body and received.body["messages"][0]["role"] == "user"


async def test_the_local_summarizer_opens_one_connection_per_request(server: ProviderServer) -> None:
    """llama.cpp's server closes each connection after its reply; a pooled one was dead by the next
    request ("Can not write request body", then a retry). Each request says Connection: close."""
    server.script(*chunk_replies(["one", "two"]))
    summarizer = LocalSummarizer(server.base_url, "smollm2", provider="local", **FAST)
    async with summarizer:
        for _ in range(2):
            await summarizer.summarize(make_request())
    assert [r.headers.get("Connection") for r in server.received] == ["close", "close"]


def test_local_estimate_scales_to_the_local_tokenizer() -> None:
    message = Message(id="m", role="user", content=(TextBlock("x" * 400),))
    assert local_estimate(METER.message, 2.0)(message) == 2 * METER.message(message)
    with pytest.raises(CompactionConfigError, match="ratio > 0"):
        local_estimate(METER.message, 0)


async def test_the_registry_chunks_to_the_summarizer_window(server: ProviderServer) -> None:
    options = SummarizerOptions(base_url=server.base_url, model="m", window_tokens=1200)
    async with SUMMARIZERS.open("openai", options) as summarizer:
        assert isinstance(summarizer, ChunkingSummarizer) and summarizer.window_tokens == 1200
    unbounded = SummarizerOptions(base_url=server.base_url, model="m")
    async with SUMMARIZERS.open("openai", unbounded) as summarizer:
        assert not isinstance(summarizer, ChunkingSummarizer)
    with pytest.raises(CompactionConfigError, match="--summarizer-window\\) must be a positive"):
        SummarizerOptions(window_tokens=0)
