"""The shared machinery of model-backed summarizers: one aiohttp client, SSE decoding, retries.

    HttpSummarizer (Summarizer)   POST one streaming request, fold its events, check the outcome
    ├── OpenAISummarizer           ``/v1/chat/completions`` (openai.py)
    └── AnthropicSummarizer        ``/v1/messages`` (anthropic.py)

Every failure is a :class:`~compaction.errors.SummarizerError` whose ``code`` says how it failed:

    connect        the server could not be reached (retried, then raised as retryable)
    timeout        no connection within ``Timeouts.connect`` or no data for ``Timeouts.read``
    disconnected   the stream broke off before its finish marker (retryable)
    rate_limited   HTTP 408/409/429 (retried, honouring ``Retry-After``)
    server_error   HTTP 5xx (retried)
    auth           HTTP 401/403;  not_found  HTTP 404;  bad_request  any other 4xx
    stream_error   the server reported an error inside the stream
    protocol       the stream was not the provider's format
    refusal        the model refused (or a content filter stopped it)
    context_length ContextLengthError;  max_tokens  TruncatedError;  empty  EmptySummaryError
    unsupported_content  UnsupportedOutputError (tool calls, images or audio in the output)

API keys are kept in :class:`ApiKey`, whose repr is ``***``; every message built here is redacted.
"""

from __future__ import annotations

import asyncio
import codecs
import logging
import os
import random
import re
from abc import abstractmethod
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, NamedTuple, Protocol, Self
from urllib.parse import urlsplit

import aiohttp
import msgspec

from compaction.errors import (
    CompactionConfigError,
    ContextLengthError,
    EmptySummaryError,
    SummarizerError,
    TruncatedError,
)
from compaction.instruction import INSTRUCTION_PLUGIN
from compaction.sessions.blocks import Message, Source, TextBlock
from compaction.sessions.events import Usage
from compaction.summarizers.base import Summarizer, SummaryOutput, SummaryRequest

log = logging.getLogger("compaction.summarizers")

JSON = dict[str, Any]

# ---------------------------------------------------------------- configuration


class ApiKey:
    """A secret that never shows itself (``repr`` and ``str`` are ``***``); ``reveal()`` it for
    the request header only."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "ApiKey('***')"

    __str__ = __repr__


def resolve_key(explicit: str | None, env_var: str) -> ApiKey | None:
    """The explicit key, else the environment variable, else None (servers that need none)."""
    value = explicit if explicit is not None else os.environ.get(env_var)
    return ApiKey(value) if value else None


@dataclass(frozen=True)
class Timeouts:
    """``connect``: seconds to open the connection; ``read``: longest silence between two reads of
    the stream (a slow model keeps streaming, a stuck one goes silent); ``total``: optional cap."""

    connect: float = 10.0
    read: float = 120.0
    total: float | None = None

    def __post_init__(self) -> None:
        for name in ("connect", "read", "total"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise CompactionConfigError(f"Timeouts.{name} must be > 0 seconds, got {value!r}")

    def client_timeout(self) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(
            total=self.total, sock_connect=self.connect, sock_read=self.read
        )


DEFAULT_TIMEOUTS = Timeouts()


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter for 408/409/429/5xx and connection failures.

    The n-th retry waits ``Retry-After`` when the server sends one no longer than ``backoff_max``,
    else ``backoff_base * 2**n`` (capped at ``backoff_max``) scaled by a random factor in [0.5, 1].
    """

    max_retries: int = 3
    backoff_base: float = 0.5
    backoff_max: float = 30.0

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise CompactionConfigError(f"max_retries must be >= 0, got {self.max_retries!r}")
        if self.backoff_base < 0 or self.backoff_max < 0:
            raise CompactionConfigError(
                f"backoff_base and backoff_max must be >= 0 seconds, got "
                f"{self.backoff_base!r} and {self.backoff_max!r}"
            )

    def delay(self, retry: int, retry_after: float | None) -> float:
        if retry_after is not None and 0 <= retry_after <= self.backoff_max:
            return retry_after
        ceiling = min(self.backoff_max, self.backoff_base * 2.0**retry)
        return ceiling * (0.5 + random.random() / 2)


def retry_after(headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """Seconds from ``retry-after-ms``, or ``Retry-After`` (seconds or an HTTP date)."""
    if (millis := headers.get("retry-after-ms")) is not None:
        try:
            return float(millis) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def redact(text: str, key: ApiKey | None) -> str:
    if key is None or not key.reveal():
        return text
    return text.replace(key.reveal(), "***")


def redacted(error: SummarizerError, key: ApiKey | None) -> SummarizerError:
    """``error`` itself, or the same kind of error with the key masked in its message."""
    safe = redact(str(error), key)
    if safe == str(error):
        return error
    clean = type(error)(safe, code=error.code, retryable=error.retryable)
    clean.__cause__ = error.__cause__
    return clean


def endpoint_url(base_url: str, path: str) -> str:
    """``base_url`` + ``/v1`` + ``path``, accepting base URLs with or without the ``/v1`` suffix."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CompactionConfigError(
            f"summarizer base URL must be http(s)://HOST[:PORT][/PATH], got {base_url!r}"
        )
    base = base_url.rstrip("/")
    return f"{base}{path}" if base.endswith("/v1") else f"{base}/v1{path}"


# ---------------------------------------------------------------- request pieces for both providers


def instruction_message(request: SummaryRequest) -> Message:
    """The single final user message carrying the instruction (spec §d.12)."""
    return Message(
        id=f"{request.compaction_id}/instruction",
        role="user",
        content=(TextBlock(request.instruction),),
        source=Source(
            kind="plugin", plugin=INSTRUCTION_PLUGIN, compaction_id=request.compaction_id
        ),
    )


def tool_schema(parameters: Mapping[str, Any]) -> JSON:
    return dict(parameters) if parameters else {"type": "object", "properties": {}}


# ---------------------------------------------------------------- server-sent events


class SSEEvent(NamedTuple):
    event: str
    data: str


_EOL = re.compile(r"\r\n|\r|\n")


class SSEDecoder:
    """Incremental text/event-stream decoder (WHATWG rules: CRLF, CR or LF line ends, comment
    lines, multi-line data)."""

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""
        self._event = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        self._buffer += self._utf8.decode(chunk)
        events: list[SSEEvent] = []
        start = 0
        for match in _EOL.finditer(self._buffer):
            if match.group() == "\r" and match.end() == len(self._buffer):
                break  # maybe the first half of a CRLF split across chunks
            self._line(self._buffer[start : match.start()], events)
            start = match.end()
        self._buffer = self._buffer[start:]
        return events

    def close(self) -> list[SSEEvent]:
        """End of stream: a last line without its newline, and an event without its blank line,
        still count."""
        events = self.feed(b"")
        self._buffer += self._utf8.decode(b"", final=True)
        for line in _EOL.split(self._buffer):
            if line:
                self._line(line, events)
        self._buffer = ""
        self._line("", events)
        return events

    def _line(self, line: str, events: list[SSEEvent]) -> None:
        if not line:
            if self._data:
                events.append(SSEEvent(self._event or "message", "\n".join(self._data)))
            self._event, self._data = "", []
            return
        if line.startswith(":"):
            return
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value


def decode_event(event: SSEEvent, provider: str) -> JSON:
    try:
        value = msgspec.json.decode(event.data)
    except msgspec.DecodeError as e:
        raise SummarizerError(
            f"{provider} stream: expected a JSON object in a {event.event!r} event, got "
            f"{event.data[:200]!r}",
            code="protocol",
        ) from e
    if not isinstance(value, dict):
        raise SummarizerError(
            f"{provider} stream: expected a JSON object in a {event.event!r} event, got "
            f"{type(value).__name__}",
            code="protocol",
        )
    return value


# ---------------------------------------------------------------- stream folds and their outcome


class StreamResult(NamedTuple):
    """What a finished stream assembled. ``stop`` is ``complete``, ``truncated`` or ``refused``."""

    text: str
    model: str | None
    usage: Usage | None
    stop: str
    reason: str | None


class StreamFold(Protocol):
    """Folds a provider's events; raises SummarizerError subclasses as soon as the output is bad."""

    @property
    def done(self) -> bool:
        """The end-of-stream marker arrived; stop reading."""

    @property
    def finished(self) -> bool:
        """A finish reason arrived: the text is complete even if the connection ends now."""

    def feed(self, event: SSEEvent) -> None: ...

    def result(self) -> StreamResult: ...


_THINK = re.compile(r"^\s*<think>.*?(</think>|$)", re.DOTALL)


def strip_reasoning(text: str) -> str:
    """Drop a leading ``<think>...</think>`` block (servers that inline reasoning into content)."""
    return _THINK.sub("", text, count=1)


def finished_output(
    result: StreamResult, *, provider: str, requested_model: str, max_tokens: int
) -> SummaryOutput:
    model = result.model or requested_model
    where = f"{provider} model {model}"
    output_tokens = result.usage.output_tokens if result.usage else None
    spent = f"after {output_tokens} output tokens" if output_tokens is not None else "at the cap"
    if result.stop == "truncated":
        raise TruncatedError(
            f"summarization truncated at the token cap (incomplete checkpoint): {where} stopped "
            f"with {result.reason!r} {spent} (max_tokens {max_tokens}); raise max_tokens or "
            "compact a smaller span"
        )
    if result.stop == "refused":
        raise SummarizerError(
            f"{where} refused to summarize (stop reason {result.reason!r}); the span may contain "
            "content the model will not process",
            code="refusal",
        )
    text = strip_reasoning(result.text).strip()
    if not text:
        raise EmptySummaryError(
            f"summarization produced no text summary content: {where} finished with "
            f"{result.reason!r} {spent} but no text (reasoning only or an empty reply)"
        )
    return SummaryOutput(
        text=text, provider=provider, model=model, max_tokens=max_tokens, usage=result.usage
    )


# ---------------------------------------------------------------- error classification

_CONTEXT_PATTERNS = (
    "context_length_exceeded",
    "maximum context length",
    "exceeds the context window",
    "exceed_context_size_error",
    "exceeds the available context size",
    "prompt is too long",
    "input is too long",
)
_RETRY_STATUSES = frozenset({408, 409, 429})
RETRIED_CODES = frozenset({"connect", "rate_limited", "server_error"})
"""Failure codes retried inside one ``summarize`` call; other retryable ones go to the caller."""


def error_details(body: Any) -> tuple[str, str]:
    """``(type-or-code, message)`` from OpenAI, Anthropic and llama.cpp error bodies."""
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, dict):
        kind = error.get("type") or error.get("code") or ""
        code = error.get("code")
        if isinstance(code, str) and code != kind:
            kind = f"{kind}/{code}" if kind else code
        return str(kind), str(error.get("message") or "")
    return "", str(error or "")


def is_context_length(kind: str, message: str) -> bool:
    haystack = f"{kind} {message}".lower()
    return any(pattern in haystack for pattern in _CONTEXT_PATTERNS)


def status_error(
    provider: str, url: str, status: int, body: bytes, key_hint: str
) -> SummarizerError:
    try:
        kind, message = error_details(msgspec.json.decode(body))
    except msgspec.DecodeError:
        kind, message = "", body.decode("utf-8", "replace")[:500]
    detail = f"{provider} {url} answered HTTP {status}" + (f" ({kind})" if kind else "")
    detail += f": {message}" if message else ""
    if status == 413 or is_context_length(kind, message):
        return ContextLengthError(f"{detail}; the summarization prompt does not fit the model")
    if status in (401, 403):
        return SummarizerError(f"{detail}; check the API key ({key_hint} or api_key=)", code="auth")
    if status == 404:
        return SummarizerError(f"{detail}; check the base URL and the model name", code="not_found")
    if status in _RETRY_STATUSES:
        return SummarizerError(detail, code="rate_limited", retryable=True)
    if status >= 500:
        return SummarizerError(detail, code="server_error", retryable=True)
    return SummarizerError(detail, code="bad_request")


def stream_error(provider: str, error: Any) -> SummarizerError:
    kind, message = error_details({"error": error})
    detail = f"{provider} stream reported an error" + (f" ({kind})" if kind else "")
    detail += f": {message}" if message else ""
    if is_context_length(kind, message):
        return ContextLengthError(f"{detail}; the summarization prompt does not fit the model")
    retryable = any(word in kind for word in ("overloaded", "server", "api_error", "rate_limit"))
    return SummarizerError(detail, code="stream_error", retryable=retryable)


# ---------------------------------------------------------------- the client


class HttpClient:
    """One aiohttp session (borrowed or owned), timeouts, and bounded retries before the stream."""

    def __init__(
        self,
        *,
        provider: str,
        timeouts: Timeouts,
        retry: RetryPolicy,
        session: aiohttp.ClientSession | None,
        key: ApiKey | None,
        key_hint: str,
    ) -> None:
        self.provider = provider
        self.timeouts = timeouts
        self.retry = retry
        self._session = session
        self._owns_session = session is None
        self._key = key
        self._key_hint = key_hint

    async def aclose(self) -> None:
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
            self._owns_session = True
        return self._session

    @asynccontextmanager
    async def stream(
        self, url: str, payload: JSON, headers: Mapping[str, str]
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """The 200 response of a POST, after retries; closed (not pooled) if the reader fails."""
        response = await self._post_with_retries(url, msgspec.json.encode(payload), headers)
        try:
            yield response
        except BaseException:
            response.close()  # cancellation or a bad stream: drop the connection now
            raise
        else:
            response.release()

    async def _post_with_retries(
        self, url: str, body: bytes, headers: Mapping[str, str]
    ) -> aiohttp.ClientResponse:
        retries = 0
        while True:
            wait: float | None = None
            try:
                response = await self._post(url, body, headers)
                if response.status == 200:
                    return response
                error = await self._status_error(url, response)
                wait = retry_after(response.headers)
            except SummarizerError as e:
                error = e
            if error.code not in RETRIED_CODES or retries >= self.retry.max_retries:
                raise error
            delay = self.retry.delay(retries, wait)
            retries += 1
            log.warning(
                "%s: retry %d/%d in %.2f s after: %s",
                self.provider,
                retries,
                self.retry.max_retries,
                delay,
                error,
            )
            await asyncio.sleep(delay)

    async def _post(
        self, url: str, body: bytes, headers: Mapping[str, str]
    ) -> aiohttp.ClientResponse:
        try:
            return await self._client().post(
                url, data=body, headers=dict(headers), timeout=self.timeouts.client_timeout()
            )
        except aiohttp.ConnectionTimeoutError as e:
            raise SummarizerError(
                f"{self.provider}: no connection to {url} within {self.timeouts.connect} s "
                "(connect timeout)",
                code="timeout",
                retryable=True,
            ) from e
        except TimeoutError as e:
            raise SummarizerError(
                f"{self.provider}: no response from {url} within {self.timeouts.read} s "
                "(read timeout)",
                code="timeout",
                retryable=True,
            ) from e
        except aiohttp.ClientConnectionError as e:
            raise SummarizerError(
                redact(f"{self.provider}: could not reach {url}: {e}", self._key),
                code="connect",
                retryable=True,
            ) from None
        except aiohttp.ClientError as e:
            raise SummarizerError(
                redact(f"{self.provider}: request to {url} failed: {e}", self._key),
                code="connect",
            ) from None

    async def _not_a_stream(self, url: str, response: aiohttp.ClientResponse) -> SummarizerError:
        try:
            body = msgspec.json.decode(await response.content.read(65536))
        except (aiohttp.ClientError, TimeoutError, msgspec.DecodeError):
            body = None
        if isinstance(body, dict) and body.get("error"):
            return stream_error(self.provider, body["error"])
        return SummarizerError(
            f"{self.provider}: {url} answered 200 with application/json, expected a "
            'text/event-stream (the server ignored "stream": true)',
            code="protocol",
        )

    async def _status_error(self, url: str, response: aiohttp.ClientResponse) -> SummarizerError:
        try:
            body = await response.content.read(65536)
        except (aiohttp.ClientError, TimeoutError):
            body = b""
        finally:
            response.close()
        error = status_error(self.provider, url, response.status, body, self._key_hint)
        return redacted(error, self._key)

    async def read(self, url: str, response: aiohttp.ClientResponse, fold: StreamFold) -> None:
        """Feed the response's events to ``fold`` until it is done or the stream ends."""
        if response.content_type == "application/json":
            raise await self._not_a_stream(url, response)
        decoder = SSEDecoder()
        try:
            async for chunk in response.content.iter_any():
                for event in decoder.feed(chunk):
                    fold.feed(event)
                    if fold.done:
                        return
            for event in decoder.close():
                fold.feed(event)
        except TimeoutError as e:
            raise SummarizerError(
                f"{self.provider}: no data from {url} for {self.timeouts.read} s (read timeout)",
                code="timeout",
                retryable=True,
            ) from e
        except aiohttp.ClientError as e:
            raise SummarizerError(
                redact(f"{self.provider}: the stream from {url} broke off: {e}", self._key),
                code="disconnected",
                retryable=True,
            ) from None
        if not fold.finished:
            raise SummarizerError(
                f"{self.provider}: the stream from {url} ended before its finish marker "
                "(server disconnected mid-stream)",
                code="disconnected",
                retryable=True,
            )


# ---------------------------------------------------------------- the summarizer base


class HttpSummarizer(Summarizer):
    """A summarizer speaking one provider protocol over :class:`HttpClient`."""

    provider = "http"
    path = "/chat/completions"
    key_env = "API_KEY"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: Timeouts | float = DEFAULT_TIMEOUTS,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        session: aiohttp.ClientSession | None = None,
        provider: str | None = None,
    ) -> None:
        if not model:
            raise CompactionConfigError(f"{type(self).__name__}: model must be a non-empty name")
        self.base_url = base_url
        self.url = endpoint_url(base_url, self.path)
        self.model = model
        if provider:
            self.provider = provider
        self._key = resolve_key(api_key, self.key_env)
        timeouts = timeout if isinstance(timeout, Timeouts) else Timeouts(timeout, timeout)
        self._client = HttpClient(
            provider=self.provider,
            timeouts=timeouts,
            retry=RetryPolicy(max_retries, backoff_base, backoff_max),
            session=session,
            key=self._key,
            key_hint=self.key_env,
        )

    def __repr__(self) -> str:
        key = "'***'" if self._key else "None"
        name = type(self).__name__
        return f"{name}(base_url={self.base_url!r}, model={self.model!r}, api_key={key})"

    @property
    def timeouts(self) -> Timeouts:
        return self._client.timeouts

    @property
    def retry(self) -> RetryPolicy:
        return self._client.retry

    @abstractmethod
    def payload(self, request: SummaryRequest) -> JSON:
        """The provider request body (a pure function of the request and the model)."""

    @abstractmethod
    def headers(self) -> dict[str, str]:
        """Request headers, credentials included."""

    @abstractmethod
    def new_fold(self) -> StreamFold:
        """A fresh fold for one response stream."""

    async def summarize(self, request: SummaryRequest) -> SummaryOutput:
        fold = self.new_fold()
        try:
            async with self._client.stream(
                self.url, self.payload(request), self.headers()
            ) as response:
                await self._client.read(self.url, response, fold)
        except SummarizerError as e:
            error = redacted(e, self._key)
            if error is e:
                raise
            raise error from e.__cause__
        return finished_output(
            fold.result(),
            provider=self.provider,
            requested_model=self.model,
            max_tokens=request.max_tokens,
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
