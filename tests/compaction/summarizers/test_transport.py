"""The seams of the model-backed summarizers, in process: a :class:`MockTransport` handed to the
summarizer (no server, no monkeypatching), the pure payload builders and SSE decoder, and the
registry of summarizer names shared by the command line and the audit.

test_http.py covers the same summarizers over real HTTP (aiohttp servers speaking each protocol).
"""

from __future__ import annotations

import pytest

from compaction.audit.request import request_shape
from compaction.cli.main import build_parser
from compaction.errors import (
    CompactionConfigError,
    ScriptExhaustedError,
    SummarizerError,
    UnknownSummarizerError,
    UsageError,
)
from compaction.summarizers.anthropic import AnthropicSummarizer
from compaction.summarizers.chunking import ChunkingSummarizer
from compaction.summarizers.openai import OpenAISummarizer
from compaction.summarizers.payloads import build_anthropic_payload, build_openai_payload, build_payload
from compaction.summarizers.registry import (
    SUMMARIZERS,
    SummarizerOptions,
    SummarizerRegistry,
    SummarizerSpec,
    get_summarizer,
    open_summarizer,
)
from compaction.summarizers.sse import SSEEvent, decode_events
from compaction.summarizers.template import TemplateSummarizer
from compaction.summarizers.transport import MockResponse, MockTransport, Timeouts, TransportRequest
from compaction.vocabulary.instruction import INSTRUCTION
from tests.compaction.summarizers.provider_servers import (
    ANTHROPIC_MODEL,
    OPENAI_MODEL,
    anthropic_frames,
    openai_frames,
    openai_usage,
)
from tests.compaction.summarizers.test_http import KEY, SUMMARY, make_request

FAST = {"backoff_base": 0.001, "backoff_max": 0.01}
TEXT = "".join(SUMMARY).strip()


def openai_over(transport: MockTransport, **options: object) -> OpenAISummarizer:
    options = {"api_key": KEY, **FAST, **options}
    return OpenAISummarizer("http://model.test", "gpt-4o-mini", transport=transport, **options)  # type: ignore[arg-type]


# ---------------------------------------------------------------- a fake transport, no server


async def test_openai_over_a_mock_transport_sends_the_payload_and_folds_the_stream() -> None:
    response = MockResponse.stream(*openai_frames(SUMMARY, usage=openai_usage(1200, 42, cached=1000)))
    transport = MockTransport.scripted(response)
    request = make_request()
    async with openai_over(transport, timeout=Timeouts(connect=2, read=3)) as summarizer:
        output = await summarizer.summarize(request)
    assert (output.text, output.provider, output.model) == (TEXT, "openai", OPENAI_MODEL)
    assert output.usage is not None and output.usage.cache_read_tokens == 1000
    [sent] = transport.requests
    assert sent.url == "http://model.test/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.json() == build_openai_payload(request, "gpt-4o-mini")
    assert sent.timeouts == Timeouts(connect=2, read=3)
    assert response.released and not response.closed
    assert transport.closed  # the summarizer closes its transport


async def test_anthropic_over_a_mock_transport() -> None:
    transport = MockTransport.scripted(MockResponse.stream(*anthropic_frames(SUMMARY, thinking=["hm"])))
    request = make_request()
    summarizer = AnthropicSummarizer("http://model.test", "claude-x", api_key=KEY, transport=transport)
    async with summarizer:
        output = await summarizer.summarize(request)
    assert (output.text, output.model) == (TEXT, ANTHROPIC_MODEL)
    [sent] = transport.requests
    assert sent.url == "http://model.test/v1/messages" and sent.headers["x-api-key"] == KEY
    assert sent.json() == build_anthropic_payload(request, "claude-x")


async def test_a_handler_sees_each_request() -> None:
    seen: list[TransportRequest] = []

    async def handler(request: TransportRequest) -> MockResponse:
        seen.append(request)
        return MockResponse.stream(*openai_frames([request.json()["model"]]))

    async with openai_over(MockTransport(handler)) as summarizer:
        output = await summarizer.summarize(make_request())
    assert output.text == "gpt-4o-mini" and len(seen) == 1


async def test_transport_failures_are_retried_named_and_redacted() -> None:
    refused = SummarizerError(f"could not reach http://model.test?key={KEY}", code="connect", retryable=True)
    limited = MockResponse.json({"error": {"message": "slow down"}}, 429, {"Retry-After": "0"})
    transport = MockTransport.scripted(refused, limited, MockResponse.stream(*openai_frames(SUMMARY)))
    async with openai_over(transport) as summarizer:
        output = await summarizer.summarize(make_request())
    assert output.text == TEXT and len(transport.requests) == 3
    assert limited.closed  # an error reply's connection is not reused
    transport = MockTransport.scripted(refused, refused)
    with pytest.raises(SummarizerError) as caught:
        async with openai_over(transport, max_retries=1) as summarizer:
            await summarizer.summarize(make_request())
    assert caught.value.code == "connect" and caught.value.retryable
    assert str(caught.value) == "openai: could not reach http://model.test?key=***"


async def test_a_stream_breaking_off_is_a_disconnect_and_drops_the_connection() -> None:
    broke = SummarizerError("the stream from http://x broke off", code="disconnected", retryable=True)
    response = MockResponse.stream(*openai_frames(SUMMARY)[:2], error=broke)
    with pytest.raises(SummarizerError) as caught:
        async with openai_over(MockTransport.scripted(response)) as summarizer:
            await summarizer.summarize(make_request())
    assert caught.value.code == "disconnected" and str(caught.value).startswith("openai: the stream")
    assert response.closed and not response.released


async def test_status_errors_and_json_instead_of_a_stream() -> None:
    missing = MockResponse.json({"error": {"message": "no such model", "code": "model_not_found"}}, 404)
    completion = MockResponse.json({"object": "chat.completion", "choices": []})
    async with openai_over(MockTransport.scripted(missing, completion)) as summarizer:
        with pytest.raises(SummarizerError, match="no such model") as caught:
            await summarizer.summarize(make_request())
        assert caught.value.code == "not_found"
        with pytest.raises(SummarizerError, match=r"ignored .stream.: true") as caught:
            await summarizer.summarize(make_request())
        assert caught.value.code == "protocol"


async def test_a_scripted_transport_refuses_one_request_too_many() -> None:
    async with openai_over(MockTransport.scripted()) as summarizer:
        with pytest.raises(ScriptExhaustedError, match="after all 0 scripted replies"):
            await summarizer.summarize(make_request())


async def test_chunking_over_a_mock_transport_merges() -> None:
    replies = [MockResponse.stream(*openai_frames([t])) for t in ("part A", "part B", "merged")]
    transport = MockTransport.scripted(*replies)
    request = make_request()
    estimate = {m.id: 400 for m in request.messages}
    async with ChunkingSummarizer(openai_over(transport), 1600, lambda m: estimate.get(m.id, 50)) as chunker:
        output = await chunker.summarize(make_request(max_tokens=100))
    assert (output.text, output.chunks, len(transport.requests)) == ("merged", 2, 3)


# ---------------------------------------------------------------- pure pieces


def test_payload_by_shape() -> None:
    request = make_request()
    assert build_payload("openai", request, "m") == build_openai_payload(request, "m")
    assert build_payload("anthropic", request, "m") == build_anthropic_payload(request, "m")
    body = build_payload("openai", request, "m", max_tokens_field="max_completion_tokens")
    assert body["max_completion_tokens"] == 512 and body["messages"][-1]["content"] == INSTRUCTION
    with pytest.raises(CompactionConfigError, match="expected one of openai, anthropic"):
        build_payload("gemini", request, "m")


def test_sse_decoding_of_whole_chunks() -> None:
    events = decode_events([b'event: a\ndata: {"x"', b": 1}\n\n: comment\ndata: [DONE]"])
    assert events == [SSEEvent("a", '{"x": 1}'), SSEEvent("message", "[DONE]")]


# ---------------------------------------------------------------- the registry


def test_the_registry_names_every_summarizer_and_refuses_unknown_ones() -> None:
    assert SUMMARIZERS.names() == ("template", "openai", "anthropic", "local")
    with pytest.raises(UnknownSummarizerError) as caught:
        get_summarizer("gemini")
    assert str(caught.value) == (
        "unknown summarizer 'gemini'; expected one of: template, openai, anthropic, local"
    )
    assert isinstance(caught.value, CompactionConfigError) and isinstance(caught.value, LookupError)
    with pytest.raises(CompactionConfigError, match="already registered"):
        SummarizerRegistry([SUMMARIZERS.get("template"), SUMMARIZERS.get("template")])


def test_the_command_line_offers_the_registry() -> None:
    parser = build_parser()
    assert parser.parse_args(["compact", "abc", "--summarizer", "anthropic"]).summarizer == "anthropic"
    with pytest.raises(UsageError, match="choose from 'template', 'openai', 'anthropic', 'local'"):
        parser.parse_args(["compact", "abc", "--summarizer", "gemini"])
    assert get_summarizer("local").default_max_tokens == 512


async def test_open_builds_each_summarizer_with_the_options() -> None:
    async with open_summarizer("template") as template:
        assert isinstance(template, TemplateSummarizer)
    transport = MockTransport.scripted(MockResponse.stream(*openai_frames(SUMMARY)))
    options = SummarizerOptions(base_url="http://model.test/v1", model="qwen", transport=transport)
    async with SUMMARIZERS.open("openai", options) as summarizer:
        assert isinstance(summarizer, OpenAISummarizer) and summarizer.transport is transport
        assert (await summarizer.summarize(make_request())).text == TEXT
    assert transport.closed
    with pytest.raises(CompactionConfigError, match="summarizer anthropic needs a model name"):
        SUMMARIZERS.open("anthropic", SummarizerOptions(base_url="http://model.test"))


def test_a_custom_registry_entry() -> None:
    spec = SummarizerSpec(
        name="echo", help="test", shape="summary-request", open=SUMMARIZERS.get("template").open
    )
    registry = SummarizerRegistry([spec])
    assert registry.names() == ("echo",) and "echo" in registry and "template" not in registry
    assert registry.request_shape("echo") == "summary-request" and registry.request_shape("x") is None


@pytest.mark.parametrize(
    ("provider", "shape"),
    [
        ("template", "summary-request"),
        ("checkpoint", "summary-request"),
        ("openai", "openai"),
        ("local", "openai"),
        ("vllm", "openai"),  # provider= renamed an OpenAI-compatible summarizer
        ("anthropic", "anthropic"),
    ],
)
def test_the_audit_takes_request_shapes_from_the_registry(provider: str, shape: str) -> None:
    assert request_shape(provider) == shape
