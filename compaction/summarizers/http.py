"""The shared machinery of model-backed summarizers: retries, status handling, stream reading.

    HttpSummarizer (Summarizer)   POST one streaming request, fold its events, check the outcome
    ├── OpenAISummarizer           ``/v1/chat/completions`` (openai.py)
    └── AnthropicSummarizer        ``/v1/messages`` (anthropic.py)

The bytes travel over a :class:`~compaction.summarizers.transport.Transport` (``transport=``; the
default is :class:`~compaction.summarizers.aiohttp_transport.AiohttpTransport`), the request
bodies come from :mod:`~compaction.summarizers.payloads` and the stream is decoded by
:mod:`~compaction.summarizers.sse`; this module imports no HTTP client.

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
from typing import Any, ClassVar, NamedTuple, Protocol, TypedDict, Unpack
from urllib.parse import urlsplit

import msgspec

from compaction.errors import (
    CompactionConfigError,
    ContextLengthError,
    EmptySummaryError,
    SummarizerError,
    TruncatedError,
)
from compaction.sessions.events import Usage
from compaction.summarizers.payloads import JSON
from compaction.summarizers.sse import SSEDecoder, SSEEvent
from compaction.summarizers.transport import (
    DEFAULT_TIMEOUTS,
    Timeouts,
    Transport,
    TransportRequest,
    TransportResponse,
    default_transport,
)
from compaction.vocabulary.summarizer import Summarizer, SummaryOutput, SummaryRequest

__all__ = [
    "DEFAULT_TIMEOUTS",
    "JSON",
    "RETRIED_CODES",
    "ApiKey",
    "ClientOptions",
    "HttpClient",
    "HttpSummarizer",
    "RetryPolicy",
    "StreamFold",
    "StreamResult",
    "Timeouts",
    "endpoint_url",
    "error_details",
    "finished_output",
    "is_context_length",
    "redact",
    "redacted",
    "resolve_key",
    "retry_after",
    "status_error",
    "stream_error",
    "strip_reasoning",
]

log = logging.getLogger("compaction.summarizers")

MAX_ERROR_BODY = 65536
"""Bytes of an error body read for its message."""

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
    try:
        parts = urlsplit(base_url)
        parts.port  # noqa: B018  (raises ValueError for a port out of range or not a number)
    except ValueError as e:
        raise CompactionConfigError(
            f"summarizer base URL must be http(s)://HOST[:PORT][/PATH], got {base_url!r} ({e})"
        ) from e
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CompactionConfigError(
            f"summarizer base URL must be http(s)://HOST[:PORT][/PATH], got {base_url!r}"
        )
    if parts.username is not None or parts.password is not None:
        shown = f"{parts.scheme}://***@{parts.netloc.rpartition('@')[2]}{parts.path}"
        raise CompactionConfigError(
            f"summarizer base URL {shown!r} carries credentials (USER:PASSWORD@); expected "
            "http(s)://HOST[:PORT][/PATH], with the API key in the provider's environment variable"
        )
    base = base_url.rstrip("/")
    return f"{base}{path}" if base.endswith("/v1") else f"{base}/v1{path}"


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
    return SummaryOutput(text=text, provider=provider, model=model, max_tokens=max_tokens, usage=result.usage)


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


def status_error(provider: str, url: str, status: int, body: bytes, key_hint: str) -> SummarizerError:
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
    """Bounded retries before the stream, over one :class:`Transport`; the transport's failures
    come out as SummarizerErrors naming the provider, with the key masked."""

    def __init__(
        self,
        *,
        provider: str,
        timeouts: Timeouts,
        retry: RetryPolicy,
        transport: Transport,
        key: ApiKey | None,
        key_hint: str,
    ) -> None:
        self.provider = provider
        self.timeouts = timeouts
        self.retry = retry
        self.transport = transport
        self._key = key
        self._key_hint = key_hint

    async def aclose(self) -> None:
        await self.transport.aclose()

    @asynccontextmanager
    async def stream(
        self, url: str, payload: JSON, headers: Mapping[str, str]
    ) -> AsyncIterator[TransportResponse]:
        """The 200 response of a POST, after retries; closed (not pooled) if the reader fails."""
        request = TransportRequest(url, msgspec.json.encode(payload), dict(headers), self.timeouts)
        response = await self._post_with_retries(request)
        try:
            yield response
        except BaseException:
            response.close()  # cancellation or a bad stream: drop the connection now
            raise
        else:
            response.release()

    async def _post_with_retries(self, request: TransportRequest) -> TransportResponse:
        retries = 0
        while True:
            wait: float | None = None
            try:
                response = await self._send(request)
                if response.status == 200:
                    return response
                error = await self._status_error(request.url, response)
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

    def _transport_error(self, error: SummarizerError) -> SummarizerError:
        """The transport's failure, naming the provider and with the key masked."""
        return SummarizerError(
            redact(f"{self.provider}: {error}", self._key), code=error.code, retryable=error.retryable
        )

    async def _send(self, request: TransportRequest) -> TransportResponse:
        try:
            return await self.transport.send(request)
        except SummarizerError as e:
            raise self._transport_error(e) from e.__cause__

    async def _receive(self, response: TransportResponse) -> bytes:
        try:
            return await response.receive()
        except SummarizerError as e:
            raise self._transport_error(e) from e.__cause__

    @staticmethod
    async def _body(response: TransportResponse) -> bytes:
        """Up to :data:`MAX_ERROR_BODY` bytes of a (short, error) body; what arrived if it breaks."""
        body = b""
        try:
            while len(body) < MAX_ERROR_BODY and (chunk := await response.receive()):
                body += chunk
        except SummarizerError:
            pass
        return body[:MAX_ERROR_BODY]

    async def _not_a_stream(self, url: str, response: TransportResponse) -> SummarizerError:
        try:
            body = msgspec.json.decode(await self._body(response))
        except msgspec.DecodeError:
            body = None
        if isinstance(body, dict) and body.get("error"):
            return stream_error(self.provider, body["error"])
        return SummarizerError(
            f"{self.provider}: {url} answered 200 with application/json, expected a "
            'text/event-stream (the server ignored "stream": true)',
            code="protocol",
        )

    async def _status_error(self, url: str, response: TransportResponse) -> SummarizerError:
        try:
            body = await self._body(response)
        finally:
            response.close()
        error = status_error(self.provider, url, response.status, body, self._key_hint)
        return redacted(error, self._key)

    async def read(self, url: str, response: TransportResponse, fold: StreamFold) -> None:
        """Feed the response's events to ``fold`` until it is done or the stream ends."""
        if response.content_type == "application/json":
            raise await self._not_a_stream(url, response)
        decoder = SSEDecoder()
        while chunk := await self._receive(response):
            for event in decoder.feed(chunk):
                fold.feed(event)
                if fold.done:
                    return
        for event in decoder.close():
            fold.feed(event)
        if not fold.finished:
            raise SummarizerError(
                f"{self.provider}: the stream from {url} ended before its finish marker "
                "(server disconnected mid-stream)",
                code="disconnected",
                retryable=True,
            )


# ---------------------------------------------------------------- the summarizer base


class ClientOptions(TypedDict, total=False):
    """The keyword options of every model-backed summarizer (the defaults are
    :class:`HttpSummarizer`'s): the key (else the provider's environment variable), the timeouts (a
    number is both), the retries inside one call, the transport, and the provider name recorded on
    the summary."""

    api_key: str | None
    timeout: Timeouts | float
    max_retries: int
    backoff_base: float
    backoff_max: float
    transport: Transport | None
    provider: str | None


_OPTIONS = frozenset(ClientOptions.__annotations__)


class HttpSummarizer(Summarizer):
    """A summarizer speaking one provider protocol over :class:`HttpClient`.

    ``HttpSummarizer(base_url, model, **options)`` with the :class:`ClientOptions`; a provider
    supplies its ``provider`` name, endpoint ``path``, key variable ``key_env`` and
    ``default_base_url`` (used when ``base_url`` is None) as class attributes.

    ``transport``: how the bytes travel (default: a new
    :class:`~compaction.summarizers.aiohttp_transport.AiohttpTransport`, closed by ``aclose``;
    pass ``AiohttpTransport(session)`` to share an aiohttp session, or a
    :class:`~compaction.summarizers.transport.MockTransport` in tests).
    """

    provider = "http"
    path = "/chat/completions"
    key_env = "API_KEY"
    default_base_url: ClassVar[str | None] = None

    def __init__(
        self, base_url: str | None = None, model: str = "", **options: Unpack[ClientOptions]
    ) -> None:
        name = type(self).__name__
        if unknown := options.keys() - _OPTIONS:
            raise TypeError(f"{name}() got unexpected keyword arguments: {', '.join(sorted(unknown))}")
        if not model:
            raise CompactionConfigError(f"{name}: model must be a non-empty name")
        base_url = base_url or self.default_base_url
        if not base_url:
            raise CompactionConfigError(f"{name}: base_url must be http(s)://HOST[:PORT][/PATH], got None")
        self.base_url = base_url
        self.url = endpoint_url(base_url, self.path)
        self.model = model
        self.provider = options.get("provider") or self.provider
        self._key = resolve_key(options.get("api_key"), self.key_env)
        timeout = options.get("timeout", DEFAULT_TIMEOUTS)
        retry = RetryPolicy(
            options.get("max_retries", RetryPolicy.max_retries),
            options.get("backoff_base", RetryPolicy.backoff_base),
            options.get("backoff_max", RetryPolicy.backoff_max),
        )
        transport = options.get("transport")
        self._client = HttpClient(
            provider=self.provider,
            timeouts=timeout if isinstance(timeout, Timeouts) else Timeouts(timeout, timeout),
            retry=retry,
            transport=transport if transport is not None else default_transport(),
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

    @property
    def transport(self) -> Transport:
        return self._client.transport

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
            async with self._client.stream(self.url, self.payload(request), self.headers()) as response:
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
