"""Anthropic messages (``/v1/messages``), streaming.

The request body is :func:`~compaction.summarizers.payloads.build_anthropic_payload`: the
conversation's own ``system`` and ``tools``, the shadowed messages in the Anthropic shape (roles
alternate; tool results lead the next user message), and the instruction merged into the final
user turn. The stream is ``message_start`` (model, input usage), ``content_block_start`` /
``content_block_delta`` / ``content_block_stop`` per block, ``message_delta`` (stop reason, output
usage) and ``message_stop``. Thinking blocks are dropped;
tool use, images or any other block type in the output are refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Unpack

from compaction.errors import CompactionConfigError, UnsupportedOutputError
from compaction.sessions.events import Usage
from compaction.summarizers.http import ClientOptions, HttpSummarizer, StreamResult, stream_error
from compaction.summarizers.payloads import JSON, build_anthropic_payload
from compaction.summarizers.sse import SSEEvent, decode_event
from compaction.vocabulary.summarizer import SummaryRequest

__all__ = [
    "ANTHROPIC_URL",
    "ANTHROPIC_VERSION",
    "AnthropicStreamFold",
    "AnthropicSummarizer",
    "anthropic_usage",
    "build_anthropic_payload",
]

ANTHROPIC_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"


def anthropic_usage(raw: JSON) -> Usage:
    """Anthropic usage is already disjoint (input excludes cache reads and writes)."""

    def get(key: str) -> int:
        value = raw.get(key)
        return value if isinstance(value, int) else 0

    return Usage(
        input_tokens=get("input_tokens"),
        output_tokens=get("output_tokens"),
        cache_read_tokens=get("cache_read_input_tokens"),
        cache_write_tokens=get("cache_creation_input_tokens"),
    )


_REASONING_BLOCKS = frozenset({"thinking", "redacted_thinking"})
_STOPS = {
    "max_tokens": "truncated",
    "model_context_window_exceeded": "truncated",
    "refusal": "refused",
}


class AnthropicStreamFold:
    """Assembles Anthropic stream events into a :class:`StreamResult`."""

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.done = False
        self.finished = False
        self._text: dict[int, list[str]] = {}
        self._model: str | None = None
        self._usage: JSON = {}
        self._reason: str | None = None
        self._handlers: dict[str, Callable[[JSON], None]] = {
            "message_start": self._message_start,
            "content_block_start": self._block_start,
            "content_block_delta": self._block_delta,
            "message_delta": self._message_delta,
            "message_stop": self._message_stop,
            "error": self._error,
        }

    def feed(self, event: SSEEvent) -> None:
        data = decode_event(event, self.provider)
        handler = self._handlers.get(str(data.get("type") or event.event))
        if handler is not None:  # ping, content_block_stop and future event types carry nothing
            handler(data)

    def _message_start(self, data: JSON) -> None:
        message = data.get("message") or {}
        if isinstance(message.get("model"), str) and message["model"]:
            self._model = message["model"]
        self._usage.update(message.get("usage") or {})

    def _block_start(self, data: JSON) -> None:
        block = data.get("content_block") or {}
        kind = block.get("type")
        if kind == "text":
            self._text.setdefault(int(data.get("index", 0)), []).append(str(block.get("text", "")))
        elif kind not in _REASONING_BLOCKS:
            raise self._unsupported(f"a {kind!r} content block")

    def _block_delta(self, data: JSON) -> None:
        delta = data.get("delta") or {}
        kind = delta.get("type")
        if kind == "text_delta":
            self._text.setdefault(int(data.get("index", 0)), []).append(str(delta.get("text", "")))
        elif kind == "input_json_delta":
            raise self._unsupported("tool input")
        # thinking, signature, citations and future deltas of allowed blocks carry no summary text

    def _message_delta(self, data: JSON) -> None:
        reason = (data.get("delta") or {}).get("stop_reason")
        self._usage.update(data.get("usage") or {})
        if reason in ("tool_use", "pause_turn"):
            raise self._unsupported(f"stop reason {reason!r} (a tool call)")
        if reason:
            self._reason = str(reason)
            self.finished = True

    def _message_stop(self, data: JSON) -> None:
        self.done = True

    def _error(self, data: JSON) -> None:
        raise stream_error(self.provider, data.get("error") or data)

    def _unsupported(self, what: str) -> UnsupportedOutputError:
        model = self._model or "the model"
        return UnsupportedOutputError(
            f"{self.provider} model {model} answered the summarization request with {what}; a "
            "summary must be text only (the instruction forbids tool calls)"
        )

    def result(self) -> StreamResult:
        text = "\n".join("".join(self._text[i]) for i in sorted(self._text))
        usage = anthropic_usage(self._usage) if self._usage else None
        stop = _STOPS.get(self._reason or "", "complete")
        return StreamResult(text, self._model, usage, stop, self._reason)


class AnthropicSummarizer(HttpSummarizer):
    """Summarizes through Anthropic's ``/v1/messages`` (streaming).

    The key comes from ``api_key`` or ``ANTHROPIC_API_KEY`` and is sent as ``x-api-key`` with
    ``anthropic-version``. ``base_url`` defaults to https://api.anthropic.com.
    """

    provider = "anthropic"
    path = "/messages"
    key_env = "ANTHROPIC_API_KEY"

    default_base_url = ANTHROPIC_URL

    def __init__(
        self,
        base_url: str | None = None,
        model: str = "",
        *,
        anthropic_version: str = ANTHROPIC_VERSION,
        **options: Unpack[ClientOptions],
    ) -> None:
        super().__init__(base_url, model, **options)
        self.anthropic_version = anthropic_version
        if self.url.startswith(ANTHROPIC_URL) and self._key is None:
            raise CompactionConfigError(
                f"AnthropicSummarizer: no API key for {ANTHROPIC_URL}: set ANTHROPIC_API_KEY or pass api_key="
            )

    def payload(self, request: SummaryRequest) -> JSON:
        return build_anthropic_payload(request, self.model)

    def headers(self) -> dict[str, str]:
        headers = {
            "content-type": "application/json",
            "accept": "text/event-stream",
            "anthropic-version": self.anthropic_version,
        }
        if self._key is not None:
            headers["x-api-key"] = self._key.reveal()
        return headers

    def new_fold(self) -> AnthropicStreamFold:
        return AnthropicStreamFold(self.provider)
