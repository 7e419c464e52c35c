"""The asyncio side of the JetStream store: one connection, one stream, the few operations it needs.

Everything here runs on the recorders' private event loop (:mod:`compaction.sessions.nats.loop`).
Reads go through short-lived pull consumers (ack policy none, filtered to one subject or to every
session subject) told to start at a stream sequence; the consumer's pending count says how many
messages to fetch, so no fetch waits for a timeout. Publishes carry a ``Nats-Msg-Id`` and are
retried on a timeout or a missing leader (a cluster electing a new one after a node loss): the
server's de-duplication window answers a retry of a message it already stored with the original
acknowledgement instead of storing it twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig
from nats.js.client import JetStreamContext

from compaction.errors import PerhapsStoredError

CONNECT_ATTEMPTS = 2
ASK_TIMEOUT = 1.5
"""Seconds a retried request (a read, a publish with its message id) waits for its answer."""
CREATE_TIMEOUT = 0.5
"""Seconds the creation of a read consumer waits for its answer before it is tried again."""
RETRY_FOR = 30.0
"""Seconds a publish is retried after timeouts or a missing stream leader."""
RETRY_PAUSE = 0.25
log = logging.getLogger("compaction.store.nats")
T = TypeVar("T")
FETCH_BATCH = 512
STREAM_NAME_IN_USE = 10058
NO_SUITABLE_PEERS = 10005
WRONG_LAST_SEQUENCE = 10071
"""JetStream's error code for a failed ``Nats-Expected-Last-Subject-Sequence``."""
STORE_FAILED = 10077
"""JetStream's error code for a message the stream refused to store (a limit reached, a full
disk): answered with 503 like a missing leader, but definite, so never retried."""


TRANSIENT: tuple[type[Exception], ...] = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.StaleConnectionError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
    nats.js.errors.ServerError,
    asyncio.TimeoutError,
)
"""What a cluster shows while a node is down or a stream elects a new leader: retried."""


async def retrying(operation: Callable[[], Awaitable[T]]) -> T:
    """``operation()``, retried on :data:`TRANSIENT` errors for up to :data:`RETRY_FOR` seconds."""
    deadline = time.monotonic() + RETRY_FOR
    while True:
        try:
            return await operation()
        except TRANSIENT as e:
            if time.monotonic() > deadline or getattr(e, "err_code", None) == STORE_FAILED:
                raise
            await asyncio.sleep(RETRY_PAUSE)


MSG_ID = "Nats-Msg-Id"


@dataclass(frozen=True)
class Record:
    """One stored message."""

    seq: int
    subject: str
    headers: dict[str, str] | None
    data: bytes


@dataclass(frozen=True)
class Connected:
    """What :meth:`JetStreamLog.connect` opened: the connection and its three JetStream contexts,
    which differ only in how long a request waits for its answer."""

    nc: Client
    js: JetStreamContext
    """Requests that are not simply retried (stream and bucket creation): the store's timeout."""
    ask: JetStreamContext
    """Retried requests (reads, publishes with their message id): :data:`ASK_TIMEOUT`."""
    create: JetStreamContext
    """The creation of short-lived read consumers: :data:`CREATE_TIMEOUT`."""


class JetStreamLog:
    """A connection to the servers and the store's streams: ``S`` (the commit messages of the
    sessions, nothing else, so its sequence counts saves) and ``S_chunks`` (the chunks of large
    saves and of large snapshots). The key-value buckets live beside them
    (:mod:`compaction.sessions.nats.buckets`). Every method takes the stream it works on; the
    default is ``S``."""

    def __init__(self, servers: list[str], stream: str, replicas: int, timeout: float) -> None:
        self.servers = servers
        self.stream = stream
        self.chunk_stream = f"{stream}_chunks"
        self.streams = (stream, self.chunk_stream)
        self.replicas = replicas
        self.timeout = timeout
        self._connected: Connected | None = None

    @property
    def connected(self) -> Connected:
        """The connection and its contexts; an :class:`AssertionError` before :meth:`connect`."""
        assert self._connected is not None, "JetStreamLog used before connect()"
        return self._connected

    @property
    def nc(self) -> Client:
        return self.connected.nc

    @property
    def js(self) -> JetStreamContext:
        return self.connected.js

    @property
    def ask(self) -> JetStreamContext:
        return self.connected.ask

    @property
    def max_payload(self) -> int:
        return int(self.nc.max_payload)

    async def connect(self) -> None:
        nc = await nats.connect(
            servers=self.servers,
            connect_timeout=self.timeout,
            allow_reconnect=True,
            max_reconnect_attempts=CONNECT_ATTEMPTS,  # each server, at first: fail fast when down
            reconnect_time_wait=0.2,
            error_cb=_logged,
        )
        # Once connected, reconnect for as long as it takes (a cluster node restarting).
        nc.options["max_reconnect_attempts"] = -1
        self._connected = Connected(
            nc=nc,
            js=nc.jetstream(timeout=self.timeout),
            # Reads and publishes that can simply be retried wait briefly for an answer: a request
            # to a stream leader that just died is never answered, and a new one is elected in
            # seconds.
            ask=nc.jetstream(timeout=min(ASK_TIMEOUT, self.timeout)),
            # nats-server 2.9 may place a new ephemeral consumer on a replica that is down; the
            # request then goes unanswered, and the next attempt is placed anew.
            create=nc.jetstream(timeout=min(CREATE_TIMEOUT, self.timeout)),
        )
        for stream in self.streams:
            await retrying(lambda stream=stream: self._ensure_stream(stream))  # type: ignore[misc]

    async def _ensure_stream(self, stream: str) -> None:
        try:
            await self.ask.stream_info(stream)
            return
        except nats.js.errors.NotFoundError:
            pass
        config = StreamConfig(
            name=stream,
            subjects=[f"{stream}.>"],
            storage=StorageType.FILE,
            num_replicas=self.replicas,
            duplicate_window=120.0,
        )
        try:
            await self.js.add_stream(config)
        except nats.js.errors.BadRequestError as e:
            if e.err_code == NO_SUITABLE_PEERS:  # a cluster still forming, or a node down
                raise nats.js.errors.ServiceUnavailableError(description=str(e)) from e
            if e.err_code != STREAM_NAME_IN_USE:
                raise
            await self.js.stream_info(stream)  # created by another process meanwhile

    async def close(self) -> None:
        if self._connected is not None and not self._connected.nc.is_closed:
            await self._connected.nc.close()

    # ------------------------------------------------------------ writing

    async def publish(self, subject: str, body: bytes, headers: dict[str, str], msg_id: str) -> int:
        """Store one message; its stream sequence. A wrong expected sequence raises
        :class:`nats.js.errors.BadRequestError` (``err_code`` :data:`WRONG_LAST_SEQUENCE`)."""
        headers = {**headers, MSG_ID: msg_id}
        attempts = 0

        async def once() -> int:
            nonlocal attempts
            attempts += 1
            ack = await self.ask.publish(subject, body, headers=dict(headers))
            return int(ack.seq)

        try:
            return await retrying(once)
        except nats.js.errors.BadRequestError as e:
            if attempts > 1 and e.err_code == WRONG_LAST_SEQUENCE:
                raise PerhapsStoredError(msg_id) from e
            raise

    async def listen(self, subject: str, wake: Callable[[], None]) -> Subscription:
        """Call ``wake`` for every message published on ``subject`` from now on (a core NATS
        subscription: JetStream delivers each stored message to core subscribers too)."""

        async def woken(_: Msg) -> None:
            wake()

        return await self.nc.subscribe(subject, cb=woken)

    async def purge(self, stream: str, subject: str) -> None:
        await retrying(lambda: self.ask.purge_stream(stream, subject=subject))

    # ------------------------------------------------------------ reading

    async def last(self, subject: str, stream: str | None = None) -> Record | None:
        try:
            raw = await retrying(lambda: self.ask.get_last_msg(stream or self.stream, subject))
        except nats.js.errors.NotFoundError:
            return None
        return Record(int(raw.seq or 0), str(raw.subject), raw.headers, raw.data or b"")

    async def get(self, seq: int, stream: str | None = None, *, subject: str | None = None) -> Record | None:
        """The message at ``seq``; with ``subject``, the first message of that subject at or
        after ``seq``."""
        try:
            name = stream or self.stream
            if subject is None:
                raw = await retrying(lambda: self.ask.get_msg(name, seq))
            else:
                raw = await retrying(lambda: self.ask.get_msg(name, seq, subject=subject, next=True))
        except nats.js.errors.NotFoundError:
            return None
        return Record(int(raw.seq or 0), str(raw.subject), raw.headers, raw.data or b"")

    async def scan(
        self,
        subject: str,
        start: int = 1,
        *,
        limit: int | None = None,
        headers_only: bool = False,
        stream: str | None = None,
    ) -> list[Record]:
        """The messages of ``subject`` (wildcards allowed) from stream sequence ``start`` on, in
        order; at most ``limit`` of them. Read again from the start on a transient error."""
        return await retrying(
            lambda: self._scan(subject, start, limit=limit, headers_only=headers_only, stream=stream)
        )

    async def _scan(
        self,
        subject: str,
        start: int = 1,
        *,
        limit: int | None = None,
        headers_only: bool = False,
        stream: str | None = None,
    ) -> list[Record]:
        config = ConsumerConfig(
            filter_subject=subject,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=max(1, start),
            ack_policy=AckPolicy.NONE,
            headers_only=headers_only or None,
            inactive_threshold=60.0,
            mem_storage=True,
            num_replicas=1,
        )
        stream = stream or self.stream
        sub = await self.connected.create.pull_subscribe(subject, stream=stream, config=config)
        name = ""
        try:
            info = await sub.consumer_info()
            name = str(info.name)
            wanted = int(info.num_pending or 0)
            if limit is not None:
                wanted = min(wanted, limit)
            records: list[Record] = []
            while len(records) < wanted:
                batch = await sub.fetch(min(FETCH_BATCH, wanted - len(records)), timeout=self.timeout)
                for msg in batch:
                    records.append(Record(msg.metadata.sequence.stream, msg.subject, msg.headers, msg.data))
            return records
        finally:
            await sub.unsubscribe()
            if name:
                await _delete_consumer(self.ask, stream, name)


async def _logged(error: Exception) -> None:
    log.debug("nats: %s", error)


async def _delete_consumer(js: JetStreamContext, stream: str, name: str) -> None:
    # gone already, or removed by its inactivity threshold later
    with contextlib.suppress(nats.js.errors.NotFoundError, nats.errors.TimeoutError):
        await js.delete_consumer(stream, name)
