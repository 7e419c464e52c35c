"""OpenAI-compatible chat completions (``/v1/chat/completions``): OpenAI, vLLM, llama.cpp, Ollama.

The request body is :func:`~compaction.summarizers.payloads.build_openai_payload`: the
conversation's own system prompt and tools, the shadowed messages in the chat shape, then the
instruction as the final user message; streamed with ``stream_options.include_usage`` so usage
arrives in a last chunk whose ``choices`` is empty. Reasoning (``reasoning_content`` /
``reasoning`` deltas, or an inline ``<think>`` block) is dropped; tool calls, images or audio in
the output are refused.
"""

from __future__ import annotations

from typing import Any, Unpack

from compaction.errors import UnsupportedOutputError
from compaction.sessions.events import Usage
from compaction.summarizers.http import ClientOptions, HttpSummarizer, StreamResult, stream_error
from compaction.summarizers.payloads import JSON, MaxTokensField, build_openai_payload
from compaction.summarizers.sse import SSEEvent, decode_event
from compaction.vocabulary.summarizer import SummaryRequest

__all__ = [
    "MaxTokensField",
    "OpenAIStreamFold",
    "OpenAISummarizer",
    "build_openai_payload",
    "openai_usage",
]


def openai_usage(raw: JSON) -> Usage:
    """Chat-completions usage in disjoint buckets (``prompt_tokens`` includes the cached ones)."""
    prompt = _int(raw.get("prompt_tokens"))
    cached = _int((raw.get("prompt_tokens_details") or {}).get("cached_tokens"))
    reasoning = _int((raw.get("completion_tokens_details") or {}).get("reasoning_tokens"))
    return Usage(
        input_tokens=max(prompt - cached, 0),
        cache_read_tokens=cached,
        output_tokens=_int(raw.get("completion_tokens")),
        reasoning_tokens=reasoning,
    )


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0


_UNSUPPORTED_DELTAS = {
    "tool_calls": "a tool call",
    "function_call": "a function call",
    "images": "an image",
    "audio": "audio",
}
_STOPS = {"length": "truncated", "content_filter": "refused"}


class OpenAIStreamFold:
    """Assembles ``chat.completion.chunk`` events (choice 0) into a :class:`StreamResult`."""

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.done = False
        self.finished = False
        self._parts: list[str] = []
        self._model: str | None = None
        self._usage: Usage | None = None
        self._reason: str | None = None

    def feed(self, event: SSEEvent) -> None:
        if event.data.strip() == "[DONE]":
            self.done = True
            return
        chunk = decode_event(event, self.provider)
        if chunk.get("error"):
            raise stream_error(self.provider, chunk["error"])
        if isinstance(chunk.get("model"), str) and chunk["model"]:
            self._model = chunk["model"]
        if isinstance(chunk.get("usage"), dict):
            self._usage = openai_usage(chunk["usage"])
        for choice in chunk.get("choices") or ():
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._choice(choice)

    def _choice(self, choice: JSON) -> None:
        delta = choice.get("delta") or {}
        for key, what in _UNSUPPORTED_DELTAS.items():
            if delta.get(key):
                raise self._unsupported(what)
        if delta.get("refusal"):
            self._reason = "refusal"
            self.finished = True
        self._content(delta.get("content"))
        reason = choice.get("finish_reason")
        if reason:
            if reason in ("tool_calls", "function_call"):
                raise self._unsupported("a tool call")
            self._reason = self._reason or str(reason)
            self.finished = True

    def _content(self, content: Any) -> None:
        if isinstance(content, str):
            self._parts.append(content)
            return
        for part in content or ():  # content-part arrays from some servers
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                self._parts.append(str(part.get("text", "")))
            elif kind not in ("reasoning", "thinking"):
                raise self._unsupported(f"a {kind!r} content part")

    def _unsupported(self, what: str) -> UnsupportedOutputError:
        model = self._model or "the model"
        return UnsupportedOutputError(
            f"{self.provider} model {model} answered the summarization request with {what}; a "
            "summary must be text only (the instruction forbids tool calls)"
        )

    def result(self) -> StreamResult:
        stop = "refused" if self._reason == "refusal" else _STOPS.get(self._reason or "", "complete")
        return StreamResult("".join(self._parts), self._model, self._usage, stop, self._reason)


class OpenAISummarizer(HttpSummarizer):
    """Summarizes through an OpenAI-compatible ``/v1/chat/completions`` endpoint (streaming).

    ``base_url`` may end with or without ``/v1``. The key comes from ``api_key`` or
    ``OPENAI_API_KEY``; without one no ``Authorization`` header is sent (local servers).
    ``max_tokens_field`` is ``max_tokens`` (widest support) or ``max_completion_tokens``.
    """

    provider = "openai"
    path = "/chat/completions"
    key_env = "OPENAI_API_KEY"

    default_base_url = "https://api.openai.com/v1"

    def __init__(
        self,
        base_url: str | None = None,
        model: str = "",
        *,
        max_tokens_field: MaxTokensField = "max_tokens",
        **options: Unpack[ClientOptions],
    ) -> None:
        super().__init__(base_url, model, **options)
        self.max_tokens_field: MaxTokensField = max_tokens_field

    def payload(self, request: SummaryRequest) -> JSON:
        return build_openai_payload(request, self.model, max_tokens_field=self.max_tokens_field)

    def headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        if self._key is not None:
            headers["authorization"] = f"Bearer {self._key.reveal()}"
        return headers

    def new_fold(self) -> OpenAIStreamFold:
        return OpenAIStreamFold(self.provider)
