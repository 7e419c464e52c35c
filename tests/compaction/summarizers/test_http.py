"""Model-backed summarizers against real aiohttp servers speaking each provider's protocol."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import aiohttp
import msgspec
import pytest

from compaction.engine.meters import HeuristicMeter
from compaction.errors import (
    CompactionConfigError,
    ContextLengthError,
    EmptySummaryError,
    SummarizerError,
    TruncatedError,
    UnsupportedOutputError,
)
from compaction.sessions.blocks import (
    ImageBlock,
    Message,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from compaction.sessions.events import ToolSpec, Usage
from compaction.summarizers.aiohttp_transport import AiohttpTransport
from compaction.summarizers.anthropic import AnthropicSummarizer
from compaction.summarizers.chunking import (
    ChunkingSummarizer,
    balanced_chunks,
    chunk_count,
    tool_units,
)
from compaction.summarizers.http import HttpSummarizer, RetryPolicy, endpoint_url, retry_after
from compaction.summarizers.openai import OpenAISummarizer
from compaction.summarizers.payloads import build_anthropic_payload, build_openai_payload
from compaction.summarizers.sse import SSEDecoder, SSEEvent
from compaction.summarizers.transport import Timeouts
from compaction.vocabulary.instruction import INSTRUCTION
from compaction.vocabulary.summarizer import SummaryOutput, SummaryRequest
from tests.compaction.summarizers.provider_servers import (
    ANTHROPIC_CONTEXT_ERROR,
    ANTHROPIC_MODEL,
    ANTHROPIC_OVERLOADED,
    JSON,
    LLAMA_CPP_CONTEXT_ERROR,
    LLAMA_CPP_RECORDED,
    OPENAI_CONTEXT_ERROR,
    OPENAI_MODEL,
    ProviderServer,
    Reply,
    anthropic_block,
    anthropic_end,
    anthropic_frames,
    anthropic_start,
    anthropic_text,
    openai_chunk,
    openai_frames,
    openai_tool_call_frames,
    openai_usage,
    sse,
)

KEY = "sk-test-4f9c2a7be1d05533"
FAST: dict[str, Any] = {"backoff_base": 0.001, "backoff_max": 0.01}

SUMMARY = ["## Primary Request and Intent\n", "- Fix the failing test in `src/app.py`\n"]


def make_request(max_tokens: int = 512) -> SummaryRequest:
    return SummaryRequest(
        session_id="s-1",
        compaction_id="cmp-1",
        system="You are a coding agent.",
        tools=(
            ToolSpec(
                name="read_file",
                description="Read a file",
                parameters={"type": "object", "properties": {"path": {"type": "string"}}},
            ),
            ToolSpec(name="noop"),
        ),
        messages=(
            Message(id="u1", role="user", content=(TextBlock("Fix the failing test"),)),
            Message(
                id="a1",
                role="assistant",
                content=(
                    ReasoningBlock("let me look"),
                    TextBlock("Reading the file."),
                    ToolCallBlock("call_1", "read_file", '{"path": "src/app.py"}'),
                ),
            ),
            Message(
                id="r1",
                role="user",
                content=(ToolResultBlock("call_1", (TextBlock("def main(): ..."),)),),
            ),
            Message(
                id="u2",
                role="user",
                content=(
                    TextBlock("Here is the screenshot"),
                    ImageBlock("att-1", "image/png", width=640, height=480),
                ),
            ),
            Message(id="a2", role="assistant", content=(TextBlock("The test now passes."),)),
        ),
        instruction=INSTRUCTION,
        max_tokens=max_tokens,
    )


@pytest.fixture
async def server() -> AsyncIterator[ProviderServer]:
    provider = await ProviderServer().start()
    yield provider
    await provider.stop()


def openai(server: ProviderServer, **options: object) -> OpenAISummarizer:
    options = {"api_key": KEY, **FAST, **options}
    return OpenAISummarizer(server.base_url, "gpt-4o-mini", **options)  # type: ignore[arg-type]


def anthropic(server: ProviderServer, **options: object) -> AnthropicSummarizer:
    options = {"api_key": KEY, **FAST, **options}
    return AnthropicSummarizer(server.base_url, "claude-sonnet-4-5", **options)  # type: ignore[arg-type]


async def summarize(summarizer: HttpSummarizer, request: SummaryRequest | None = None) -> SummaryOutput:
    async with summarizer:
        return await summarizer.summarize(request or make_request())


# ---------------------------------------------------------------- OpenAI: the request


async def test_openai_success_assembles_text_usage_and_reported_model(
    server: ProviderServer,
) -> None:
    usage = openai_usage(prompt=1200, completion=42, cached=1000, reasoning=7)
    server.script(Reply(frames=openai_frames(SUMMARY, usage=usage, reasoning=["hmm, "])))
    output = await summarize(openai(server))
    assert output.text == "".join(SUMMARY).strip()
    assert (output.provider, output.model, output.max_tokens, output.chunks) == (
        "openai",
        OPENAI_MODEL,
        512,
        1,
    )
    assert output.usage == Usage(
        input_tokens=200, cache_read_tokens=1000, output_tokens=42, reasoning_tokens=7
    )


async def test_openai_request_shape(server: ProviderServer) -> None:
    server.script(Reply(frames=openai_frames(SUMMARY)))
    request = make_request()
    await summarize(openai(server), request)
    [received] = server.received
    assert received.path == "/v1/chat/completions"
    assert received.headers["Authorization"] == f"Bearer {KEY}"
    body = received.body
    assert body == build_openai_payload(request, "gpt-4o-mini")
    assert body["model"] == "gpt-4o-mini"
    assert body["max_tokens"] == 512
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert [t["function"]["name"] for t in body["tools"]] == ["read_file", "noop"]
    assert body["tools"][0] == {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
    assert body["tools"][1]["function"]["parameters"] == {"type": "object", "properties": {}}
    messages = body["messages"]
    assert messages[0] == {"role": "system", "content": "You are a coding agent."}
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "user",
        "assistant",
        "user",
    ]
    assert messages[2]["tool_calls"][0]["id"] == "call_1"
    assert messages[2]["content"] == "Reading the file."  # reasoning is not sent back
    assert messages[3] == {"role": "tool", "tool_call_id": "call_1", "content": "def main(): ..."}
    assert messages[4]["content"] == "Here is the screenshot\n[image att-1 image/png 640x480]"
    assert messages[-1] == {"role": "user", "content": INSTRUCTION}


async def test_openai_max_completion_tokens_field(server: ProviderServer) -> None:
    server.script(Reply(frames=openai_frames(SUMMARY)))
    await summarize(openai(server, max_tokens_field="max_completion_tokens"))
    body = server.received[0].body
    assert body["max_completion_tokens"] == 512 and "max_tokens" not in body


async def test_openai_key_from_environment_and_none_without(
    server: ProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.script(Reply(frames=openai_frames(SUMMARY)), Reply(frames=openai_frames(SUMMARY)))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    await summarize(OpenAISummarizer(server.base_url, "m"))
    monkeypatch.delenv("OPENAI_API_KEY")
    await summarize(OpenAISummarizer(server.base_url + "/v1", "m"))
    assert server.received[0].headers["Authorization"] == "Bearer sk-from-env"
    assert "Authorization" not in server.received[1].headers
    assert server.received[1].path == "/v1/chat/completions"


async def test_llama_cpp_recorded_stream(server: ProviderServer) -> None:
    server.script(Reply(frames=LLAMA_CPP_RECORDED))
    output = await summarize(OpenAISummarizer(server.base_url, "local-alias", **FAST))
    assert output.text == "Welcome to"
    assert output.model == "smollm2"  # as the server reported it
    assert output.usage == Usage(input_tokens=54, cache_read_tokens=3, output_tokens=8)


async def test_openai_inline_think_block_is_stripped(server: ProviderServer) -> None:
    texts = ["<think>the user wants", " a summary</think>\n\n", *SUMMARY]
    server.script(Reply(frames=openai_frames(texts)))
    output = await summarize(openai(server))
    assert output.text == "".join(SUMMARY).strip()


async def test_openai_usage_missing_is_none_and_done_optional(server: ProviderServer) -> None:
    server.script(Reply(frames=openai_frames(SUMMARY, done=False)))
    output = await summarize(openai(server))
    assert output.usage is None and output.text


# ---------------------------------------------------------------- OpenAI: failures


async def test_openai_429_then_success_honours_retry_after(server: ProviderServer) -> None:
    rate_limited = {"error": {"message": "Rate limit reached", "type": "requests"}}
    server.script(
        Reply(status=429, headers={"Retry-After": "0"}, body=rate_limited),
        Reply(frames=openai_frames(SUMMARY)),
    )
    output = await summarize(openai(server, backoff_base=30.0, backoff_max=60.0))
    assert output.text and len(server.received) == 2  # Retry-After: 0 beat the 30 s backoff


async def test_openai_500_retries_exhausted(server: ProviderServer) -> None:
    error = {"error": {"message": "The server had an error", "type": "server_error"}}
    server.script(*[Reply(status=500, body=error) for _ in range(3)])
    with pytest.raises(SummarizerError) as caught:
        await summarize(openai(server, max_retries=2))
    assert caught.value.code == "server_error" and caught.value.retryable
    assert "HTTP 500" in str(caught.value) and "The server had an error" in str(caught.value)
    assert len(server.received) == 3


async def test_openai_read_timeout_before_headers(server: ProviderServer) -> None:
    server.script(Reply(before=2.0, frames=openai_frames(SUMMARY)))
    started = asyncio.get_running_loop().time()
    with pytest.raises(SummarizerError) as caught:
        await summarize(openai(server, timeout=Timeouts(connect=1.0, read=0.2)))
    assert caught.value.code == "timeout" and caught.value.retryable
    assert "read timeout" in str(caught.value)
    assert asyncio.get_running_loop().time() - started < 1.5
    assert len(server.received) == 1  # timeouts go to the caller, not the retry loop


async def test_openai_read_timeout_mid_stream(server: ProviderServer) -> None:
    frames = openai_frames(SUMMARY)
    server.script(Reply(frames=frames[:2], then="silent"))
    with pytest.raises(SummarizerError) as caught:
        await summarize(openai(server, timeout=Timeouts(connect=1.0, read=0.2)))
    assert caught.value.code == "timeout"


async def test_openai_mid_stream_disconnect(server: ProviderServer) -> None:
    server.script(Reply(frames=openai_frames(SUMMARY)[:2], then="disconnect"))
    with pytest.raises(SummarizerError) as caught:
        await summarize(openai(server))
    assert caught.value.code == "disconnected" and caught.value.retryable
    assert len(server.received) == 1


async def test_openai_clean_end_without_finish_is_a_disconnect(server: ProviderServer) -> None:
    server.script(Reply(frames=openai_frames(SUMMARY)[:2]))
    with pytest.raises(SummarizerError) as caught:
        await summarize(openai(server))
    assert caught.value.code == "disconnected"
    assert "ended before its finish marker" in str(caught.value)


async def test_openai_truncation(server: ProviderServer) -> None:
    usage = openai_usage(prompt=900, completion=512)
    server.script(Reply(frames=openai_frames(SUMMARY, finish="length", usage=usage)))
    with pytest.raises(TruncatedError) as caught:
        await summarize(openai(server))
    assert caught.value.code == "max_tokens" and not caught.value.retryable
    assert "after 512 output tokens (max_tokens 512)" in str(caught.value)


async def test_openai_empty_output(server: ProviderServer) -> None:
    server.script(Reply(frames=openai_frames(["", "  \n"], reasoning=["only thoughts"])))
    with pytest.raises(EmptySummaryError, match="no text summary content"):
        await summarize(openai(server))


async def test_openai_tool_call_output_refused(server: ProviderServer) -> None:
    server.script(Reply(frames=openai_tool_call_frames()))
    with pytest.raises(UnsupportedOutputError) as caught:
        await summarize(openai(server))
    assert caught.value.code == "unsupported_content" and "tool call" in str(caught.value)


async def test_openai_image_content_part_refused(server: ProviderServer) -> None:
    part = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    frames = [sse(openai_chunk({"content": [part]})), sse(openai_chunk({}, "stop"))]
    server.script(Reply(frames=frames))
    with pytest.raises(UnsupportedOutputError, match="image_url"):
        await summarize(openai(server))


@pytest.mark.parametrize("body", [OPENAI_CONTEXT_ERROR, LLAMA_CPP_CONTEXT_ERROR])
async def test_openai_context_length_error(server: ProviderServer, body: dict[str, object]) -> None:
    server.script(Reply(status=400, body=body))
    with pytest.raises(ContextLengthError) as caught:
        await summarize(openai(server))
    assert caught.value.code == "context_length" and not caught.value.retryable
    assert "HTTP 400" in str(caught.value)
    assert len(server.received) == 1


async def test_openai_error_inside_stream(server: ProviderServer) -> None:
    error = {"error": {"message": "upstream overloaded", "type": "server_error"}}
    server.script(Reply(frames=[*openai_frames(SUMMARY)[:2], sse(error)]))
    with pytest.raises(SummarizerError) as caught:
        await summarize(openai(server))
    assert caught.value.code == "stream_error" and caught.value.retryable
    assert "upstream overloaded" in str(caught.value)


async def test_openai_json_instead_of_a_stream(server: ProviderServer) -> None:
    completion = {"object": "chat.completion", "choices": [{"message": {"content": "hi"}}]}
    error = {"error": {"message": f"upstream failed for key {KEY}", "type": "server_error"}}
    server.script(Reply(body=completion), Reply(body=error))
    with pytest.raises(SummarizerError, match=r"ignored .stream.: true") as caught:
        await summarize(openai(server))
    assert caught.value.code == "protocol"
    with pytest.raises(SummarizerError) as caught:
        await summarize(openai(server))
    assert caught.value.code == "stream_error" and caught.value.retryable
    assert "upstream failed for key ***" in str(caught.value)


async def test_openai_not_found_and_bad_request(server: ProviderServer) -> None:
    missing = {"error": {"message": "The model `nope` does not exist", "code": "model_not_found"}}
    server.script(Reply(status=404, body=missing), Reply(status=422, body={"detail": "bad"}))
    with pytest.raises(SummarizerError) as caught:
        await summarize(openai(server))
    assert caught.value.code == "not_found" and "check the base URL and the model" in str(caught.value)
    with pytest.raises(SummarizerError) as caught:
        await summarize(openai(server))
    assert caught.value.code == "bad_request" and len(server.received) == 2


async def test_a_borrowed_aiohttp_session_is_used_and_left_open(server: ProviderServer) -> None:
    server.script(Reply(frames=openai_frames(SUMMARY)), Reply(frames=openai_frames(SUMMARY)))
    async with aiohttp.ClientSession() as session:
        transport = AiohttpTransport(session)
        for _ in range(2):  # closing a summarizer leaves the borrowed session to its owner
            output = await summarize(openai(server, transport=transport))
            assert output.text and not session.closed
    assert len(server.received) == 2


async def test_connection_refused_is_retried_then_raised() -> None:
    server = await ProviderServer().start()
    base_url = server.base_url
    await server.stop()  # nothing listens on the port any more
    with pytest.raises(SummarizerError) as caught:
        await summarize(OpenAISummarizer(base_url, "m", max_retries=1, **FAST))
    assert caught.value.code == "connect" and caught.value.retryable
    assert base_url in str(caught.value)


# ---------------------------------------------------------------- cancellation


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
async def test_cancellation_closes_the_stream_promptly(server: ProviderServer, protocol: str) -> None:
    if protocol == "openai":
        head = openai_frames(SUMMARY)[:2]
        more = sse(openai_chunk({"content": " more"}))
        summarizer: HttpSummarizer = openai(server)
    else:
        head = [anthropic_start(), *anthropic_text(0, ["x"])[:2]]
        more = sse(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": " more"},
            },
            "content_block_delta",
        )
        summarizer = anthropic(server)
    server.script(Reply(frames=head, then="forever", forever_frame=more))
    async with summarizer:
        task = asyncio.create_task(summarizer.summarize(make_request()))
        await asyncio.wait_for(server.streaming.wait(), timeout=5.0)  # past the head frames
        assert not task.done() and not server.closed_early.is_set()
        cancelled_at = asyncio.get_running_loop().time()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(server.closed_early.wait(), timeout=2.0)
    assert server.closed_at is not None and server.closed_at - cancelled_at < 0.5


# ---------------------------------------------------------------- secrets


async def test_key_never_in_errors_reprs_or_logs(
    server: ProviderServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    echo = {
        "error": {
            "message": f"Incorrect API key provided: {KEY}.",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
    }
    server.script(
        Reply(status=429, headers={"Retry-After": "0"}, body={"error": {"message": f"slow {KEY}"}}),
        Reply(status=401, body=echo),
    )
    summarizer = openai(server)
    with pytest.raises(SummarizerError) as caught:
        await summarize(summarizer)
    assert caught.value.code == "auth" and "OPENAI_API_KEY" in str(caught.value)
    assert "Incorrect API key provided: ***" in str(caught.value)
    assert any("retry 1/3" in r.getMessage() for r in caplog.records)  # the retry was logged
    everything = [str(caught.value), repr(summarizer), str(vars(summarizer)), caplog.text]
    assert all(KEY not in text for text in everything)
    assert server.received[0].headers["Authorization"] == f"Bearer {KEY}"  # but it was sent


# ---------------------------------------------------------------- Anthropic


async def test_anthropic_success_strips_thinking(server: ProviderServer) -> None:
    frames = anthropic_frames(
        SUMMARY, thinking=["The user ", "wants a checkpoint."], cache_read=1800, cache_write=40
    )
    server.script(Reply(frames=frames))
    output = await summarize(anthropic(server))
    assert output.text == "".join(SUMMARY).strip()
    assert "checkpoint." not in output.text
    assert (output.provider, output.model, output.max_tokens) == ("anthropic", ANTHROPIC_MODEL, 512)
    assert output.usage == Usage(
        input_tokens=2095, output_tokens=210, cache_read_tokens=1800, cache_write_tokens=40
    )


async def test_anthropic_request_shape(server: ProviderServer) -> None:
    server.script(Reply(frames=anthropic_frames(SUMMARY)))
    request = make_request()
    await summarize(anthropic(server), request)
    [received] = server.received
    assert received.path == "/v1/messages"
    assert received.headers["x-api-key"] == KEY
    assert received.headers["anthropic-version"] == "2023-06-01"
    body = received.body
    assert body == build_anthropic_payload(request, "claude-sonnet-4-5")
    assert (body["model"], body["max_tokens"], body["stream"]) == ("claude-sonnet-4-5", 512, True)
    assert body["system"] == "You are a coding agent."
    assert body["tools"][0] == {
        "name": "read_file",
        "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
    messages = body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    tool_use = messages[1]["content"][-1]
    assert tool_use == {
        "type": "tool_use",
        "id": "call_1",
        "name": "read_file",
        "input": {"path": "src/app.py"},
    }
    assert messages[2]["content"][0]["type"] == "tool_result"
    assert messages[2]["content"][0]["tool_use_id"] == "call_1"
    assert messages[-1]["content"][-1] == {"type": "text", "text": INSTRUCTION}
    assert all(b["type"] != "thinking" for m in messages for b in m["content"])


def test_anthropic_span_starting_with_assistant_gets_a_user_lead() -> None:
    request = make_request()
    request = msgspec.structs.replace(request, messages=request.messages[1:])
    body = build_anthropic_payload(request, "m")
    assert body["messages"][0]["role"] == "user"
    assert body["messages"][1]["role"] == "assistant"


def test_anthropic_empty_tool_result_sent_without_empty_text() -> None:
    request = make_request()
    empty = Message(id="r1", role="user", content=(ToolResultBlock("call_1", ()),))
    messages = (*request.messages[:2], empty, *request.messages[3:])
    request = msgspec.structs.replace(request, messages=messages)
    result = build_anthropic_payload(request, "m")["messages"][2]["content"][0]
    assert result == {"type": "tool_result", "tool_use_id": "call_1"}


async def test_anthropic_truncation(server: ProviderServer) -> None:
    server.script(Reply(frames=anthropic_frames(SUMMARY, stop_reason="max_tokens", output_tokens=512)))
    with pytest.raises(TruncatedError, match=r"'max_tokens' after 512 output tokens"):
        await summarize(anthropic(server))


async def test_anthropic_tool_use_refused(server: ProviderServer) -> None:
    tool = {"type": "tool_use", "id": "toolu_01", "name": "read_file", "input": {}}
    frames = [
        anthropic_start(),
        *anthropic_block(0, tool, [{"type": "input_json_delta", "partial_json": '{"path": "a'}]),
        *anthropic_end("tool_use"),
    ]
    server.script(Reply(frames=frames))
    with pytest.raises(UnsupportedOutputError, match="'tool_use' content block"):
        await summarize(anthropic(server))


async def test_anthropic_empty_when_only_thinking(server: ProviderServer) -> None:
    server.script(Reply(frames=anthropic_frames([], thinking=["just thinking"])))
    with pytest.raises(EmptySummaryError):
        await summarize(anthropic(server))


async def test_anthropic_context_length(server: ProviderServer) -> None:
    server.script(Reply(status=400, body=ANTHROPIC_CONTEXT_ERROR))
    with pytest.raises(ContextLengthError, match="prompt is too long"):
        await summarize(anthropic(server))


async def test_anthropic_overloaded_then_success(server: ProviderServer) -> None:
    server.script(Reply(status=529, body=ANTHROPIC_OVERLOADED), Reply(frames=anthropic_frames(SUMMARY)))
    output = await summarize(anthropic(server))
    assert output.text and len(server.received) == 2


async def test_anthropic_error_event_mid_stream(server: ProviderServer) -> None:
    frames = [
        anthropic_start(),
        *anthropic_text(0, ["partial"])[:2],
        sse(ANTHROPIC_OVERLOADED, "error"),
    ]
    server.script(Reply(frames=frames))
    with pytest.raises(SummarizerError) as caught:
        await summarize(anthropic(server))
    assert caught.value.code == "stream_error" and caught.value.retryable
    assert "overloaded_error" in str(caught.value)


async def test_anthropic_disconnect_before_message_stop(server: ProviderServer) -> None:
    server.script(Reply(frames=[anthropic_start(), *anthropic_text(0, ["partial"])], then="disconnect"))
    with pytest.raises(SummarizerError) as caught:
        await summarize(anthropic(server))
    assert caught.value.code == "disconnected"


def test_anthropic_needs_a_key_for_the_public_api(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(CompactionConfigError, match="ANTHROPIC_API_KEY"):
        AnthropicSummarizer(model="claude-sonnet-4-5")


def test_the_clients_share_one_constructor(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both clients take the same options (ClientOptions), each with its own default base URL."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    openai = OpenAISummarizer(None, "m", timeout=5, max_retries=1, provider="vllm")
    anthropic = AnthropicSummarizer("http://127.0.0.1:9", "m", timeout=5, max_retries=1, api_key="k")
    assert openai.url == "https://api.openai.com/v1/chat/completions" and openai.provider == "vllm"
    assert anthropic.url == "http://127.0.0.1:9/v1/messages" and anthropic.provider == "anthropic"
    assert openai.timeouts == anthropic.timeouts and openai.retry == anthropic.retry
    with pytest.raises(TypeError, match="max_token_field"):
        OpenAISummarizer(None, "m", max_token_field="max_tokens")  # type: ignore[call-arg]
    with pytest.raises(CompactionConfigError, match="model must be a non-empty name"):
        AnthropicSummarizer("http://127.0.0.1:9", "", api_key="k")


# ---------------------------------------------------------------- pieces


def test_sse_decoder_handles_split_lines_comments_and_multiline_data() -> None:
    decoder = SSEDecoder()
    stream = "é".encode() + b"\r"
    events = decoder.feed(b": comment\r\nevent: a\r")
    events += decoder.feed(b"\ndata: one\ndata:two\n\ndata: " + stream[:1])
    events += decoder.feed(stream[1:] + b"\ndata: tail")
    events += decoder.close()
    assert events == [SSEEvent("a", "one\ntwo"), SSEEvent("message", "é\ntail")]


def test_retry_after_forms() -> None:
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert retry_after({"retry-after": "2"}) == 2.0
    assert retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after({"retry-after": "Thu, 01 Jan 2026 12:00:05 GMT"}, now) == 5.0
    assert retry_after({"retry-after": "soon"}) is None
    assert retry_after({}) is None


def test_backoff_is_exponential_jittered_and_capped() -> None:
    policy = RetryPolicy(max_retries=5, backoff_base=1.0, backoff_max=5.0)
    for retry, ceiling in [(0, 1.0), (1, 2.0), (2, 4.0), (3, 5.0), (6, 5.0)]:
        delay = policy.delay(retry, None)
        assert ceiling / 2 <= delay <= ceiling
    assert policy.delay(0, 3.0) == 3.0  # Retry-After wins when within backoff_max
    assert policy.delay(0, 50.0) <= 1.0  # ... and is ignored when beyond it
    with pytest.raises(CompactionConfigError):
        RetryPolicy(max_retries=-1)


def test_endpoint_urls() -> None:
    assert endpoint_url("http://h:8080", "/messages") == "http://h:8080/v1/messages"
    assert endpoint_url("http://h:8080/v1/", "/chat/completions") == "http://h:8080/v1/chat/completions"
    with pytest.raises(CompactionConfigError, match="base URL"):
        endpoint_url("localhost:8080", "/messages")


# ---------------------------------------------------------------- chunking

METER = HeuristicMeter()


def long_request(steps: int = 12, output_chars: int = 400, max_tokens: int = 100) -> SummaryRequest:
    messages: list[Message] = [Message(id="u0", role="user", content=(TextBlock("Refactor"),))]
    for i in range(steps):
        call = ToolCallBlock(f"c{i}", "read_file", f'{{"path": "src/m{i}.py"}}')
        messages.append(Message(id=f"a{i}", role="assistant", content=(TextBlock(f"step {i}"), call)))
        output = (f"m{i} " * output_chars)[:output_chars]
        messages.append(
            Message(id=f"r{i}", role="user", content=(ToolResultBlock(f"c{i}", (TextBlock(output),)),))
        )
    return msgspec.structs.replace(make_request(max_tokens), messages=tuple(messages))


def chunk_replies(texts: list[str], usage: JSON | None = None) -> list[Reply]:
    return [Reply(frames=openai_frames([t], usage=usage or openai_usage(100, 10))) for t in texts]


def conversation(body: JSON) -> list[JSON]:
    """The request's messages between the system prompt and the instruction."""
    messages: list[JSON] = body["messages"]
    assert messages[0]["role"] == "system" and messages[-1] == {
        "role": "user",
        "content": INSTRUCTION,
    }
    return messages[1:-1]


def test_tool_units_keep_calls_with_results() -> None:
    call = ToolCallBlock("c1", "bash", "{}")
    call2 = ToolCallBlock("c2", "bash", "{}")
    messages = [
        Message(id="u", role="user", content=(TextBlock("go"),)),
        Message(id="a", role="assistant", content=(call, call2)),
        Message(id="r1", role="user", content=(ToolResultBlock("c1"),)),
        Message(id="steer", role="user", content=(TextBlock("also check tests"),)),
        Message(id="r2", role="user", content=(ToolResultBlock("c2"),)),
        Message(id="a2", role="assistant", content=(TextBlock("done"),)),
    ]
    units = tool_units(messages)
    assert [[m.id for m in unit] for unit in units] == [["u"], ["a", "r1", "steer", "r2"], ["a2"]]


def test_balanced_chunks_even_out_sizes() -> None:
    assert chunk_count([5] * 10, 30) == 2
    assert balanced_chunks([5] * 10, 2) == [0, 5]  # 25 + 25, not 30 + 20
    sizes = [10, 1, 1, 1, 1, 1, 10]
    assert chunk_count(sizes, 15) == 2
    starts = balanced_chunks(sizes, 2)
    chunks = [sum(sizes[a:b]) for a, b in zip(starts, [*starts[1:], 7], strict=True)]
    assert len(chunks) == 2 and max(chunks) <= 13


async def test_chunking_passes_through_when_the_span_fits(server: ProviderServer) -> None:
    server.script(*chunk_replies(["whole"]))
    request = make_request()
    async with ChunkingSummarizer(openai(server), 100_000, METER.message) as chunker:
        output = await chunker.summarize(request)
    assert (output.text, output.chunks, len(server.received)) == ("whole", 1, 1)
    assert server.received[0].body == build_openai_payload(request, "gpt-4o-mini")


async def test_chunking_splits_balanced_pairs_intact_and_merges(server: ProviderServer) -> None:
    request = long_request()
    chunker = ChunkingSummarizer(openai(server), 1200, METER.message)
    budget = chunker.budget(request)
    total = METER.messages(request.messages)
    assert budget < total <= 3 * budget  # needs three chunks
    server.script(*chunk_replies(["part A", "part B", "part C", "## merged"]))
    async with chunker:
        output = await chunker.summarize(request)
    assert output.text == "## merged" and output.chunks == 3
    assert output.usage == Usage(input_tokens=400, output_tokens=40)  # four calls summed
    assert output.model == OPENAI_MODEL and output.max_tokens == 100
    *chunks, merge = [r.body for r in server.received]
    whole = conversation(build_openai_payload(request, "gpt-4o-mini"))
    assert [m for body in chunks for m in conversation(body)] == whole  # nothing lost or repeated
    for body in chunks:
        assert body["tools"] == chunks[0]["tools"] and body["messages"][0] == chunks[0]["messages"][0]
        called = set()
        for message in conversation(body):
            called |= {c["id"] for c in message.get("tool_calls", ())}
            if message["role"] == "tool":
                assert message["tool_call_id"] in called  # its call travels in the same chunk
    tokens = [sum(len(str(m.get("content") or "")) for m in conversation(b)) for b in chunks]
    assert max(tokens) - min(tokens) <= max(tokens) // 3  # balanced, not full-full-remainder
    assert conversation(merge) == [
        {"role": "user", "content": f"<compacted-summary>\n{text}\n</compacted-summary>"}
        for text in ("part A", "part B", "part C")
    ]


async def test_chunking_splits_again_when_the_server_says_too_long(server: ProviderServer) -> None:
    request = long_request(steps=4)
    server.script(Reply(status=400, body=OPENAI_CONTEXT_ERROR), *chunk_replies(["x", "y", "xy"]))
    async with ChunkingSummarizer(openai(server), 100_000, METER.message) as chunker:
        output = await chunker.summarize(request)
    assert (output.text, output.chunks, len(server.received)) == ("xy", 2, 4)
    halves = [conversation(r.body) for r in server.received[1:3]]
    assert [len(h) for h in halves] == [5, 4]  # u0 + two call/result pairs, then two pairs
    assert halves[1][0]["tool_calls"][0]["id"] == "c2"


async def test_chunking_refuses_an_unsplittable_unit(server: ProviderServer) -> None:
    request = long_request(steps=3, output_chars=8000)
    async with ChunkingSummarizer(openai(server), 2000, METER.message) as chunker:
        with pytest.raises(ContextLengthError, match=r"messages a0\.\.r0 form one unsplittable"):
            await chunker.summarize(request)
    assert server.received == []


async def test_chunking_refuses_a_window_without_room(server: ProviderServer) -> None:
    async with ChunkingSummarizer(openai(server), 500, METER.message) as chunker:
        with pytest.raises(ContextLengthError, match="window of 500 tokens leaves -"):
            await chunker.summarize(make_request(max_tokens=400))
    assert server.received == []
