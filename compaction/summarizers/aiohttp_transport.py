"""The default model transport: one aiohttp client session (the only module importing aiohttp).

``AiohttpTransport()`` opens its own session on first use and closes it in ``aclose()``;
``AiohttpTransport(session)`` borrows yours (shared pool), which stays yours to close. aiohttp's
failures become :class:`~compaction.errors.SummarizerError` with code ``connect``, ``timeout`` or
``disconnected``; the aiohttp exception is dropped from the chain of connection errors (its text
is in the message, its request details are not).
"""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp

from compaction.errors import SummarizerError
from compaction.summarizers.transport import Timeouts, TransportRequest


def client_timeout(timeouts: Timeouts) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=timeouts.total, sock_connect=timeouts.connect, sock_read=timeouts.read)


class AiohttpResponse:
    """A :class:`~compaction.summarizers.transport.TransportResponse` over aiohttp's response."""

    def __init__(self, response: aiohttp.ClientResponse, request: TransportRequest) -> None:
        self._response = response
        self._request = request

    @property
    def status(self) -> int:
        return self._response.status

    @property
    def headers(self) -> Mapping[str, str]:
        return self._response.headers  # case-insensitive

    @property
    def content_type(self) -> str:
        return self._response.content_type

    async def receive(self) -> bytes:
        url = self._request.url
        try:
            return await self._response.content.readany()
        except TimeoutError as e:
            raise SummarizerError(
                f"no data from {url} for {self._request.timeouts.read} s (read timeout)",
                code="timeout",
                retryable=True,
            ) from e
        except aiohttp.ClientError as e:
            raise SummarizerError(
                f"the stream from {url} broke off: {e}", code="disconnected", retryable=True
            ) from None

    def close(self) -> None:
        self._response.close()

    def release(self) -> None:
        self._response.release()


class AiohttpTransport:
    """POSTs over one aiohttp session (borrowed, or owned and opened on first use)."""

    def __init__(self, session: aiohttp.ClientSession | None = None) -> None:
        self._session = session
        self._owns_session = session is None

    def __repr__(self) -> str:
        return f"AiohttpTransport({'own' if self._owns_session else 'borrowed'} session)"

    async def send(self, request: TransportRequest) -> AiohttpResponse:
        url, timeouts = request.url, request.timeouts
        try:
            response = await self._client().post(
                url, data=request.body, headers=dict(request.headers), timeout=client_timeout(timeouts)
            )
        except aiohttp.ConnectionTimeoutError as e:
            raise SummarizerError(
                f"no connection to {url} within {timeouts.connect} s (connect timeout)",
                code="timeout",
                retryable=True,
            ) from e
        except TimeoutError as e:
            raise SummarizerError(
                f"no response from {url} within {timeouts.read} s (read timeout)",
                code="timeout",
                retryable=True,
            ) from e
        except aiohttp.ClientConnectionError as e:
            raise SummarizerError(f"could not reach {url}: {e}", code="connect", retryable=True) from None
        except aiohttp.ClientError as e:
            raise SummarizerError(f"request to {url} failed: {e}", code="connect") from None
        return AiohttpResponse(response, request)

    async def aclose(self) -> None:
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
            self._owns_session = True
        return self._session
