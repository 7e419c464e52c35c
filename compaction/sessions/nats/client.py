"""The asyncio side of the JetStream store: one connection, one stream, the few operations it needs.

Everything here runs on the recorders' private event loop (:mod:`compaction.sessions.nats.loop`).
A read ends at what the stream's leader holds: it asks the leader for the last message of the
subject (or is told the last sequence it wants), then reads up to it, by single gets from the
leader (:meth:`JetStreamLog.get_many`) or in ordered passes of a short-lived pull consumer (ack
policy none) whose pending count is never trusted (the consumer may sit on a replica that lags).
A pass that times out or skips a delivery is resumed after the last message read; a read that
cannot finish in :data:`RETRY_FOR` seconds raises :class:`StoreUnavailableError`.

Publishes carry a ``Nats-Msg-Id`` and are retried on a timeout or a missing leader (a cluster
electing a new one after a node loss): the server's de-duplication window answers a retry of a
message it already stored with the original acknowledgement instead of storing it twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
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

from compaction.errors import PerhapsStoredError, StoreUnavailableError
from compaction.sessions.nats.acks import PublishAcks

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
"""Most messages one fetch asks for (fewer when large messages could overflow the pending bytes)."""
GETS_IN_FLIGHT = 16
"""Message gets one read keeps in flight."""
HEADS_BATCH = 8192
"""Messages one fetch of headers only asks for."""
PENDING_BYTES = 256 * 1024 * 1024
"""Bytes a read subscription may hold undelivered before the client drops messages."""
NO_MESSAGE = 10037
"""JetStream's error code for "no message found": the only "not found" a read believes."""
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
RESUMABLE: tuple[type[Exception], ...] = (*TRANSIENT, nats.js.errors.NotFoundError)
"""What ends a read pass early, to be resumed: a transient error, or a "not found" of the stream
from a node that is restarting (the read's last sequence came from the leader)."""


async def retrying(
    operation: Callable[[], Awaitable[T]], *, unavailable: str = "", doubt_not_found: bool = False
) -> T:
    """``operation()``, retried on :data:`TRANSIENT` errors for up to :data:`RETRY_FOR` seconds.

    With ``doubt_not_found`` (a read of a stream), a "not found" other than :data:`NO_MESSAGE` (a
    server that lost track of the stream while it restarts) is retried too. With ``unavailable``
    (what a read asks for), the last error is then raised as :class:`StoreUnavailableError`; else
    as itself."""
    deadline = time.monotonic() + RETRY_FOR
    while True:
        try:
            return await operation()
        except nats.js.errors.NotFoundError as e:
            if not doubt_not_found or e.err_code == NO_MESSAGE:
                raise
            last: Exception = e
        except TRANSIENT as e:
            if getattr(e, "err_code", None) == STORE_FAILED:
                raise
            last = e
        if time.monotonic() > deadline:
            if unavailable:
                raise StoreUnavailableError(
                    f"JetStream: {unavailable}: no answer in {RETRY_FOR:.0f} s of retries "
                    f"({last!r}); retry when the stream has a leader again"
                ) from last
            raise last
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
    acks: PublishAcks
    """Publishes, acknowledged on the connection's one reply subscription (:mod:`.acks`)."""


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
    def ask_timeout(self) -> float:
        """Seconds a retried request waits for its answer."""
        return min(ASK_TIMEOUT, self.timeout)

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
        acks = PublishAcks(nc)
        await acks.start()
        self._connected = Connected(
            nc=nc,
            js=nc.jetstream(timeout=self.timeout),
            # Reads and publishes that can simply be retried wait briefly for an answer: a request
            # to a stream leader that just died is never answered, and a new one is elected in
            # seconds.
            ask=nc.jetstream(timeout=self.ask_timeout),
            # nats-server 2.9 may place a new ephemeral consumer on a replica that is down; the
            # request then goes unanswered, and the next attempt is placed anew.
            create=nc.jetstream(timeout=min(CREATE_TIMEOUT, self.timeout)),
            acks=acks,
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
            ack = await self.connected.acks.publish(subject, body, dict(headers), self.ask_timeout)
            return ack.seq

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
        """The last message of ``subject`` (wildcards allowed), answered by the stream's leader;
        None only when the leader says the stream holds no such message."""
        name = stream or self.stream
        try:
            raw = await retrying(
                lambda: self.ask.get_last_msg(name, subject),
                unavailable=f"the last message of {subject} in {name}",
                doubt_not_found=True,
            )
        except nats.js.errors.NotFoundError:
            return None
        return Record(int(raw.seq or 0), str(raw.subject), raw.headers, raw.data or b"")

    async def get(self, seq: int, stream: str | None = None, *, subject: str | None = None) -> Record | None:
        """The message at ``seq``; with ``subject``, the first message of that subject at or
        after ``seq`` (answered by the stream's leader); None when the leader has none."""
        name = stream or self.stream
        try:
            if subject is None:
                raw = await retrying(
                    lambda: self.ask.get_msg(name, seq),
                    unavailable=f"the message at sequence {seq} of {name}",
                    doubt_not_found=True,
                )
            else:
                raw = await retrying(
                    lambda: self.ask.get_msg(name, seq, subject=subject, next=True),
                    unavailable=f"the first message of {subject} from sequence {seq} of {name}",
                    doubt_not_found=True,
                )
        except nats.js.errors.NotFoundError:
            return None
        return Record(int(raw.seq or 0), str(raw.subject), raw.headers, raw.data or b"")

    async def get_many(self, seqs: list[int], stream: str | None = None) -> list[Record | None]:
        """The messages at ``seqs`` (None for one the leader does not hold), asked of the stream's
        leader :data:`GETS_IN_FLIGHT` at a time: a read of a few known messages costs round
        trips, not the creation of a consumer (which a cluster agrees on through its meta leader)."""
        return await self.gets([(seq, None) for seq in seqs], stream)

    async def gets(
        self, asked: list[tuple[int, str | None]], stream: str | None = None
    ) -> list[Record | None]:
        """:meth:`get` of each ``(seq, subject)``, :data:`GETS_IN_FLIGHT` at a time, in order."""
        gate = asyncio.Semaphore(GETS_IN_FLIGHT)

        async def one(seq: int, subject: str | None) -> Record | None:
            async with gate:
                return await self.get(seq, stream, subject=subject)

        return list(await asyncio.gather(*(one(seq, subject) for seq, subject in asked)))

    async def scan(
        self,
        subject: str,
        start: int = 1,
        *,
        upto: int | None = None,
        limit: int | None = None,
        headers_only: bool = False,
        stream: str | None = None,
    ) -> list[Record]:
        """The messages of ``subject`` (wildcards allowed) with stream sequences from ``start`` to
        ``upto`` (default: the subject's last message, asked of the stream's leader), in order; at
        most ``limit`` of them. Every message the leader holds in that range is read (see
        :meth:`_pass`); a read that cannot finish in :data:`RETRY_FOR` seconds raises
        :class:`StoreUnavailableError`."""
        found = self.records(subject, start, upto=upto, limit=limit, headers_only=headers_only, stream=stream)
        async with contextlib.aclosing(found):
            return [record async for record in found]

    async def records(
        self,
        subject: str,
        start: int = 1,
        *,
        upto: int | None = None,
        limit: int | None = None,
        headers_only: bool = False,
        stream: str | None = None,
        first_fetch: int | None = None,
    ) -> AsyncGenerator[Record, None]:
        """:meth:`scan`'s messages one at a time, as they are fetched: a reader that stops early
        (closing the iterator: ``contextlib.aclosing``) has read no further than the fetch under
        way. With ``first_fetch``, the first fetch of each pass asks for that many messages and
        each next one for twice as many (up to the usual batch): a reader that needs few of them
        (a page of the notification log) fetches few."""
        name = stream or self.stream
        if upto is None:
            top = await self.last(subject, name)
            upto = 0 if top is None else top.seq
        deadline = time.monotonic() + RETRY_FOR
        next_seq, count = max(1, start), 0
        while next_seq <= upto and (limit is None or count < limit):
            room = None if limit is None else limit - count
            before, problem = next_seq, None
            passing = self._pass(
                subject,
                next_seq,
                upto=upto,
                limit=room,
                headers_only=headers_only,
                stream=name,
                first_fetch=first_fetch,
            )
            try:
                async with contextlib.aclosing(passing):
                    async for record in passing:
                        next_seq, count = record.seq + 1, count + 1
                        yield record
            except RESUMABLE as e:
                problem = e
            if next_seq > before and problem is None:
                continue  # a pass that ended at a skipped delivery: the next one resumes
            if time.monotonic() > deadline:
                raise StoreUnavailableError(
                    f"JetStream stream {name!r}: reading {subject} from sequence {next_seq} "
                    f"to {upto} did not finish in {RETRY_FOR:.0f} s of retries ({problem!r}); "
                    "the stream's leader holds these messages: retry when it answers"
                ) from problem
            await asyncio.sleep(RETRY_PAUSE)  # and resume after the last message read

    async def _pass(
        self,
        subject: str,
        start: int,
        *,
        upto: int,
        limit: int | None,
        headers_only: bool,
        stream: str,
        first_fetch: int | None = None,
    ) -> AsyncGenerator[Record, None]:
        """One ordered consumer's pass from ``start`` until ``upto`` (or ``limit`` messages).

        The consumer (ack policy none, memory, one replica) may be placed on any replica of the
        stream, including one that lags the leader: its own count of pending messages is never
        trusted as the end. The pass ends at ``upto`` (what the leader holds); a fetch that gets
        nothing in time raises a timeout, and a consumer sequence that skips one (a message the
        client dropped) ends the pass there: the caller resumes after the last message it got,
        on a new consumer."""
        config = ConsumerConfig(
            filter_subject=subject,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=start,
            ack_policy=AckPolicy.NONE,
            headers_only=headers_only or None,
            inactive_threshold=60.0,
            mem_storage=True,
            num_replicas=1,
        )
        batch = HEADS_BATCH if headers_only else self._body_batch
        sub = await self.connected.create.pull_subscribe(
            subject, stream=stream, config=config, pending_bytes_limit=PENDING_BYTES
        )
        delivered = 0
        size = batch if first_fetch is None else max(1, min(batch, first_fetch))
        try:
            while True:
                wanted = size if limit is None else min(size, limit - delivered)
                size = min(batch, 2 * size)
                for msg in await sub.fetch(wanted, timeout=self.timeout):
                    meta = msg.metadata
                    if meta.sequence.consumer != delivered + 1:
                        log.debug(
                            "%s: delivery %d after %d: resumed", subject, meta.sequence.consumer, delivered
                        )
                        return
                    delivered += 1
                    seq = meta.sequence.stream
                    if seq > upto:
                        return
                    yield Record(seq, msg.subject, msg.headers, msg.data)
                    if seq == upto or delivered == limit:
                        return
        finally:
            await _dispose(sub, stream)

    @property
    def _body_batch(self) -> int:
        """Messages per fetch of whole messages: half as many as fit the subscription's pending
        bytes at the server's maximum payload (headers and a late previous batch fit beside)."""
        return max(1, min(FETCH_BATCH, PENDING_BYTES // (2 * max(1, self.max_payload))))


async def _logged(error: Exception) -> None:
    log.debug("nats: %s", error)


async def _dispose(sub: JetStreamContext.PullSubscription, stream: str) -> None:
    """Unsubscribe and delete a read consumer (gone already, or removed later by its
    inactivity threshold when the server does not answer)."""
    name = sub._consumer
    with contextlib.suppress(Exception):
        await sub.unsubscribe()
    with contextlib.suppress(*TRANSIENT, nats.js.errors.NotFoundError, nats.errors.Error):
        await sub._js.delete_consumer(stream, name)
