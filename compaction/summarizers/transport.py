"""The model transport: the one seam between a summarizer and the network (httpx's transports).

    Transport (Protocol)      send(TransportRequest) -> TransportResponse;  aclose()
    ├── AiohttpTransport      the default, over one aiohttp session (aiohttp_transport.py)
    └── MockTransport         answers from a handler or a script, in process (tests)

A summarizer builds the request (URL, JSON body, headers, :class:`Timeouts`) and reads the reply
chunk by chunk; retries, status handling, SSE decoding and redaction stay in the summarizer. A
transport reports its own failures as :class:`~compaction.errors.SummarizerError` with ``code``
``connect``, ``timeout`` or ``disconnected`` and a message naming the URL (the summarizer adds the
provider and masks the key).

This module imports no HTTP client: aiohttp is imported by :mod:`aiohttp_transport` alone, and
only when a summarizer without a transport of its own is constructed (:func:`default_transport`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, Self

import msgspec

from compaction.errors import CompactionConfigError, ScriptExhaustedError, SummarizerError


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


DEFAULT_TIMEOUTS = Timeouts()


@dataclass(frozen=True)
class TransportRequest:
    """One POST: ``body`` is the encoded JSON payload."""

    url: str
    body: bytes
    headers: Mapping[str, str]
    timeouts: Timeouts = DEFAULT_TIMEOUTS

    def json(self) -> Any:
        return msgspec.json.decode(self.body)


class TransportResponse(Protocol):
    """The response to one request, its body read as it arrives."""

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]:
        """Looked up by lower-case name (``retry-after``)."""

    @property
    def content_type(self) -> str:
        """The media type without parameters (``text/event-stream``, ``application/json``)."""

    async def receive(self) -> bytes:
        """The next chunk of the body as it arrives (any size); ``b""`` at its end. Raises
        SummarizerError ``timeout`` (silent for ``Timeouts.read``) or ``disconnected``."""

    def close(self) -> None:
        """Drop the connection now (cancellation, a bad stream): the server sees the client go."""

    def release(self) -> None:
        """The exchange is over; the connection may be reused."""


class Transport(Protocol):
    """Sends a request and returns its response once the status and headers arrived."""

    async def send(self, request: TransportRequest) -> TransportResponse:
        """Raises SummarizerError ``connect`` (unreachable) or ``timeout``."""

    async def aclose(self) -> None:
        """Release connections; a transport may be used again after it (it reconnects)."""


def default_transport() -> Transport:
    """A new :class:`~compaction.summarizers.aiohttp_transport.AiohttpTransport` (aiohttp is
    imported here, on first use, not when a summarizer module is imported)."""
    from compaction.summarizers.aiohttp_transport import AiohttpTransport

    return AiohttpTransport()


# ---------------------------------------------------------------- in process, for tests


class MockResponse:
    """A scripted response: ``chunks`` of the body, then ``error`` (raised by ``receive`` after
    the last chunk, e.g. ``SummarizerError(..., code="disconnected")``) or the end."""

    def __init__(
        self,
        status: int = 200,
        chunks: Iterable[bytes] = (),
        *,
        headers: Mapping[str, str] | None = None,
        content_type: str = "text/event-stream",
        error: SummarizerError | None = None,
    ) -> None:
        self.status = status
        self.headers = {name.lower(): value for name, value in (headers or {}).items()}
        self.content_type = content_type
        self._chunks = deque(chunks)
        self._error = error
        self.closed = False
        self.released = False

    @classmethod
    def stream(cls, *frames: bytes, error: SummarizerError | None = None) -> Self:
        """A 200 ``text/event-stream`` of these frames."""
        return cls(200, frames, error=error)

    @classmethod
    def json(cls, value: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Self:
        """An ``application/json`` body (an error reply, or a server ignoring ``stream``)."""
        return cls(status, [msgspec.json.encode(value)], headers=headers, content_type="application/json")

    async def receive(self) -> bytes:
        await asyncio.sleep(0)  # a real read yields to the event loop
        if self._chunks:
            return self._chunks.popleft()
        if self._error is not None:
            raise self._error
        return b""

    def close(self) -> None:
        self.closed = True

    def release(self) -> None:
        self.released = True


Handler = Callable[[TransportRequest], MockResponse | Awaitable[MockResponse]]


class MockTransport:
    """Answers every request with ``handler(request)`` (a response, or an awaitable of one; it may
    raise SummarizerError to simulate a connection failure). ``requests`` records what was sent."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self.requests: list[TransportRequest] = []
        self.closed = False

    @classmethod
    def scripted(cls, *replies: MockResponse | SummarizerError) -> MockTransport:
        """Answers with ``replies`` in order (an error is raised as the failure of that send);
        one request too many raises :class:`~compaction.errors.ScriptExhaustedError`."""
        queue = deque(replies)

        def next_reply(request: TransportRequest) -> MockResponse:
            if not queue:
                raise ScriptExhaustedError(
                    f"MockTransport: a request to {request.url} after all {len(replies)} scripted "
                    "replies were used; script one more reply"
                )
            reply = queue.popleft()
            if isinstance(reply, SummarizerError):
                raise reply
            return reply

        return cls(next_reply)

    async def send(self, request: TransportRequest) -> MockResponse:
        self.requests.append(request)
        reply = self._handler(request)
        return await reply if isinstance(reply, Awaitable) else reply

    async def aclose(self) -> None:
        self.closed = True
