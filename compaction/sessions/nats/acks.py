"""JetStream publishes whose acknowledgements come back on one subscription of the connection.

nats-py's ``JetStreamContext.publish`` makes a request per message: a random token, a response
future with a timer, and the acknowledgement parsed as JSON into a dataclass. A save is one publish,
so that machinery is a large part of what a save costs the client. :class:`PublishAcks` keeps one
wildcard subscription ``<inbox>.*`` per connection, names each publish's reply subject by a counter,
and decodes the acknowledgement with msgspec. Errors are nats-py's own, as ``publish`` raises them:
:class:`nats.js.errors.NoStreamResponseError` when no stream listens, the :class:`~nats.js.errors.APIError`
subclass of the server's error (a wrong expected sequence is a ``BadRequestError`` with its
``err_code``), :class:`nats.errors.TimeoutError` when no answer came in time.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

STATUS = "Status"
NO_RESPONDERS = "503"


class PubAck(msgspec.Struct):
    """The server's answer to a publish: where the message was stored, or why it was not."""

    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    error: dict[str, Any] | None = None


_ACK = msgspec.json.Decoder(PubAck)


class PublishAcks:
    """Publishes of one connection waiting for their acknowledgements, by reply token."""

    def __init__(self, nc: Client) -> None:
        self._nc = nc
        self._prefix = ""
        self._tokens = itertools.count(1)
        self._waiting: dict[str, asyncio.Future[Msg]] = {}
        self._subscription: Subscription | None = None

    async def start(self) -> None:
        self._prefix = f"{self._nc.new_inbox()}."
        self._subscription = await self._nc.subscribe(f"{self._prefix}*", cb=self._answered)

    @property
    def waiting(self) -> int:
        """Publishes still waiting for their acknowledgement."""
        return len(self._waiting)

    async def _answered(self, msg: Msg) -> None:
        future = self._waiting.pop(msg.subject[len(self._prefix) :], None)
        if future is not None and not future.done():
            future.set_result(msg)

    async def publish(self, subject: str, body: bytes, headers: dict[str, str], timeout: float) -> PubAck:
        """Store one message; the server's acknowledgement (errors as nats-py's publish raises them)."""
        assert self._subscription is not None, "PublishAcks used before start()"
        token = str(next(self._tokens))
        answer: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()
        self._waiting[token] = answer
        try:
            await self._nc.publish(subject, body, reply=self._prefix + token, headers=headers)
            async with asyncio.timeout(timeout):
                msg = await answer
        except TimeoutError:
            raise nats.errors.TimeoutError from None
        finally:
            self._waiting.pop(token, None)
        return acknowledgement(msg)


def acknowledgement(msg: Msg) -> PubAck:
    """The acknowledgement ``msg`` carries; the error it reports, raised."""
    if msg.headers and msg.headers.get(STATUS) == NO_RESPONDERS:
        raise nats.js.errors.NoStreamResponseError
    ack = _ACK.decode(msg.data)
    if ack.error is not None:
        nats.js.errors.APIError.from_error(ack.error)  # raises the error's own class
    return ack
