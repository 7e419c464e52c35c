"""Real aiohttp servers speaking the OpenAI chat-completions and Anthropic messages protocols.

A :class:`ProviderServer` listens on 127.0.0.1 (port 0) and answers each POST with the next
scripted :class:`Reply`: an error body, or a stream of SSE frames written one by one (then ending
cleanly, breaking the connection, going silent, or streaming until the client goes away).
It records every request (path, headers, JSON body), when an endless stream is under way, and
when a client closed a stream early.

The frame builders reproduce the shapes of real responses: OpenAI's (role delta, content
deltas, a finish chunk, a usage chunk with empty ``choices``, ``data: [DONE]``), llama.cpp's
(recorded from xllamacpp's server here), and Anthropic's (message_start ... message_stop, with
a thinking block before the text).
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

JSON = dict[str, Any]
Then = Literal["end", "disconnect", "forever", "silent"]


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: JSON | None = None  # a JSON (error) body instead of a stream
    frames: list[bytes] = field(default_factory=list)
    before: float = 0.0  # seconds before the response headers
    then: Then = "end"
    forever_frame: bytes = b""  # written every 20 ms after the frames when then == "forever"


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: JSON


class ProviderServer:
    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.received: list[Received] = []
        self.closed_early = asyncio.Event()
        self.closed_at: float | None = None
        self.streaming = asyncio.Event()  # a "forever" reply is past its frames, streaming on
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    def script(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    async def start(self) -> ProviderServer:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        # handler_cancellation: a client that goes away cancels its handler (sleeps included)
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.base_url = f"http://{host}:{port}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.received.append(Received(request.path, dict(request.headers), await request.json()))
        if not self.replies:  # a request the test did not expect: fail it loudly, never retry
            error = {"error": {"message": "test server: no scripted reply left", "type": "test"}}
            return web.json_response(error, status=418)
        reply = self.replies.popleft()
        if reply.before:
            await asyncio.sleep(reply.before)
        if reply.body is not None:
            return web.json_response(reply.body, status=reply.status, headers=reply.headers)
        response = web.StreamResponse(
            status=reply.status, headers={"content-type": "text/event-stream", **reply.headers}
        )
        await response.prepare(request)
        try:
            await self._stream(request, response, reply)
        except ConnectionResetError:
            self._closed_early()
        except asyncio.CancelledError:
            self._closed_early()
            raise
        return response

    def _closed_early(self) -> None:
        if self.closed_at is None:
            self.closed_at = asyncio.get_running_loop().time()
        self.closed_early.set()

    async def _stream(self, request: web.Request, response: web.StreamResponse, reply: Reply) -> None:
        for frame in reply.frames:
            await response.write(frame)
        if reply.then == "disconnect":
            assert request.transport is not None
            request.transport.close()
        elif reply.then == "forever":
            while True:
                await response.write(reply.forever_frame)
                self.streaming.set()
                await asyncio.sleep(0.02)
        elif reply.then == "silent":
            await asyncio.sleep(30)
        else:
            await response.write_eof()


# ---------------------------------------------------------------- frames


def sse(data: JSON | str, event: str | None = None) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


OPENAI_MODEL = "gpt-4o-mini-2024-07-18"


def openai_chunk(delta: JSON | None, finish: str | None = None, **extra: Any) -> JSON:
    return {
        "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
        "object": "chat.completion.chunk",
        "created": 1741570283,
        "model": OPENAI_MODEL,
        "system_fingerprint": "fp_06737a9306",
        "choices": []
        if delta is None
        else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        **extra,
    }


def openai_usage(prompt: int, completion: int, cached: int = 0, reasoning: int = 0) -> JSON:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": reasoning,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def openai_frames(
    texts: list[str],
    *,
    finish: str = "stop",
    usage: JSON | None = None,
    reasoning: Sequence[str] = (),
    done: bool = True,
) -> list[bytes]:
    frames = [sse(openai_chunk({"role": "assistant", "content": "", "refusal": None}))]
    frames += [sse(openai_chunk({"reasoning_content": r})) for r in reasoning]
    frames += [sse(openai_chunk({"content": t})) for t in texts]
    frames.append(sse(openai_chunk({}, finish)))
    if usage is not None:
        frames.append(sse(openai_chunk(None, usage=usage)))
    if done:
        frames.append(sse("[DONE]"))
    return frames


def openai_tool_call_frames() -> list[bytes]:
    call = {
        "index": 0,
        "id": "call_DdmO9pD3xa9XTPNJ32zg2hcA",
        "type": "function",
        "function": {"name": "read_file", "arguments": ""},
    }
    return [
        sse(openai_chunk({"role": "assistant", "content": None, "tool_calls": [call]})),
        sse(openai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"path"'}}]})),
        sse(openai_chunk({}, "tool_calls")),
        sse("[DONE]"),
    ]


# Recorded from xllamacpp 2026.10.11549 serving SmolLM2 (ids as it sent them; the reply was cut
# to two deltas, its finish_reason "length" set to "stop" and its timings trimmed).
LLAMA_CPP_RECORDED = [
    b'data: {"choices":[{"finish_reason":null,"index":0,'
    b'"delta":{"role":"assistant","content":null}}],'
    b'"created":1796013334,"id":"chatcmpl-eSufboYGTzzZ4k6MJNpgFyxk8CGWKf0h","model":"smollm2",'
    b'"system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}\n\n',
    b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":"Welcome"}}],'
    b'"created":1796013334,"id":"chatcmpl-eSufboYGTzzZ4k6MJNpgFyxk8CGWKf0h","model":"smollm2",'
    b'"system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}\n\n',
    b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":" to"}}],'
    b'"created":1796013334,"id":"chatcmpl-eSufboYGTzzZ4k6MJNpgFyxk8CGWKf0h","model":"smollm2",'
    b'"system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}\n\n',
    b'data: {"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"created":1796013334,'
    b'"id":"chatcmpl-eSufboYGTzzZ4k6MJNpgFyxk8CGWKf0h","model":"smollm2",'
    b'"system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}\n\n',
    b'data: {"choices":[],"created":1796013334,"id":"chatcmpl-eSufboYGTzzZ4k6MJNpgFyxk8CGWKf0h",'
    b'"model":"smollm2","system_fingerprint":"b0-unknown","object":"chat.completion.chunk",'
    b'"usage":{"completion_tokens":8,"prompt_tokens":57,"total_tokens":65,'
    b'"prompt_tokens_details":{"cached_tokens":3}},"timings":{"cache_n":3,"prompt_n":54,'
    b'"prompt_ms":159.931,"predicted_n":8,"predicted_ms":51.048}}\n\n',
    b"data: [DONE]\n\n",
]

LLAMA_CPP_CONTEXT_ERROR = {
    "error": {
        "code": 400,
        "message": "request (3031 tokens) exceeds the available context size (2048 tokens), "
        "try increasing it",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 3031,
        "n_ctx": 2048,
    }
}

OPENAI_CONTEXT_ERROR = {
    "error": {
        "message": "This model's maximum context length is 128000 tokens. However, your messages "
        "resulted in 130412 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}

ANTHROPIC_MODEL = "claude-sonnet-4-5-20250929"


def anthropic_start(input_tokens: int = 2095, cache_read: int = 0, cache_write: int = 0) -> bytes:
    message: JSON = {
        "id": "msg_01QC4g3HwBThD4BaNtBckFDJ",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": ANTHROPIC_MODEL,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "cache_creation_input_tokens": cache_write,
            "cache_read_input_tokens": cache_read,
            "output_tokens": 1,
            "service_tier": "standard",
        },
    }
    return sse({"type": "message_start", "message": message}, "message_start")


def anthropic_block(index: int, block: JSON, deltas: list[JSON]) -> list[bytes]:
    frames = [
        sse(
            {"type": "content_block_start", "index": index, "content_block": block},
            "content_block_start",
        )
    ]
    frames += [
        sse({"type": "content_block_delta", "index": index, "delta": d}, "content_block_delta")
        for d in deltas
    ]
    frames.append(sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
    return frames


def anthropic_thinking(index: int, thoughts: Sequence[str]) -> list[bytes]:
    deltas: list[JSON] = [{"type": "thinking_delta", "thinking": t} for t in thoughts]
    deltas.append({"type": "signature_delta", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"})
    return anthropic_block(index, {"type": "thinking", "thinking": "", "signature": ""}, deltas)


def anthropic_text(index: int, texts: list[str]) -> list[bytes]:
    deltas: list[JSON] = [{"type": "text_delta", "text": t} for t in texts]
    return anthropic_block(index, {"type": "text", "text": ""}, deltas)


def anthropic_end(stop_reason: str = "end_turn", output_tokens: int = 210) -> list[bytes]:
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": None},
        "usage": {"output_tokens": output_tokens},
    }
    return [sse(delta, "message_delta"), sse({"type": "message_stop"}, "message_stop")]


def anthropic_frames(
    texts: list[str],
    *,
    thinking: Sequence[str] = (),
    stop_reason: str = "end_turn",
    output_tokens: int = 210,
    cache_read: int = 0,
    cache_write: int = 0,
) -> list[bytes]:
    frames = [anthropic_start(cache_read=cache_read, cache_write=cache_write)]
    index = 0
    if thinking:
        frames += anthropic_thinking(index, thinking)
        index += 1
    frames.append(sse({"type": "ping"}, "ping"))
    if texts:
        frames += anthropic_text(index, texts)
    return frames + anthropic_end(stop_reason, output_tokens)


ANTHROPIC_CONTEXT_ERROR = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "prompt is too long: 208656 tokens > 200000 maximum",
    },
    "request_id": "req_011CWdepJvA2D819tdYYq4h7",
}

ANTHROPIC_OVERLOADED = {
    "type": "error",
    "error": {"type": "overloaded_error", "message": "Overloaded"},
}
