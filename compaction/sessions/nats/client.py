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
from collections.abc import Callable
from dataclasses import dataclass

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig
from nats.js.client import JetStreamContext

CONNECT_ATTEMPTS = 2
RETRY_FOR = 30.0
"""Seconds a publish is retried after timeouts or a missing stream leader."""
RETRY_PAUSE = 0.25
log = logging.getLogger("compaction.store.nats")
FETCH_BATCH = 512
WRONG_LAST_SEQUENCE = 10071
"""JetStream's error code for a failed ``Nats-Expected-Last-Subject-Sequence``."""


@dataclass(frozen=True)
class Record:
    """One stored message."""

    seq: int
    subject: str
    headers: dict[str, str] | None
    data: bytes


class JetStreamLog:
    """A connection to the servers and the store's streams: ``S`` (the commit messages of the
    sessions, nothing else, so its sequence counts saves), ``S_chunks`` (the chunks of large
    saves) and ``S_snapshots`` (snapshots, chunked the same way). Every method takes the stream
    it works on; the default is ``S``."""

    def __init__(self, servers: list[str], stream: str, replicas: int, timeout: float) -> None:
        self.servers = servers
        self.stream = stream
        self.streams = (stream, f"{stream}_chunks", f"{stream}_snapshots")
        self.replicas = replicas
        self.timeout = timeout
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None

    @property
    def nc(self) -> Client:
        assert self._nc is not None, "JetStreamLog used before connect()"
        return self._nc

    @property
    def js(self) -> JetStreamContext:
        assert self._js is not None, "JetStreamLog used before connect()"
        return self._js

    @property
    def max_payload(self) -> int:
        return int(self.nc.max_payload)

    async def connect(self) -> None:
        self._nc = await nats.connect(
            servers=self.servers,
            connect_timeout=self.timeout,
            allow_reconnect=True,
            max_reconnect_attempts=CONNECT_ATTEMPTS,  # each server, at first: fail fast when down
            reconnect_time_wait=0.2,
            error_cb=_logged,
        )
        # Once connected, reconnect for as long as it takes (a cluster node restarting).
        self._nc.options["max_reconnect_attempts"] = -1
        self._js = self._nc.jetstream(timeout=self.timeout)
        for stream in self.streams:
            await self._ensure_stream(stream)

    async def _ensure_stream(self, stream: str) -> None:
        try:
            await self.js.stream_info(stream)
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
        except nats.js.errors.BadRequestError:  # created by another process meanwhile
            await self.js.stream_info(stream)

    async def close(self) -> None:
        if self._nc is not None and not self._nc.is_closed:
            await self._nc.close()

    # ------------------------------------------------------------ writing

    async def publish(
        self, subject: str, body: bytes, headers: dict[str, str], msg_id: str
    ) -> int:
        """Store one message; its stream sequence. A wrong expected sequence raises
        :class:`nats.js.errors.BadRequestError` (``err_code`` :data:`WRONG_LAST_SEQUENCE`)."""
        headers = {**headers, "Nats-Msg-Id": msg_id}
        deadline = time.monotonic() + RETRY_FOR
        while True:
            try:
                ack = await self.js.publish(subject, body, headers=dict(headers))
                return int(ack.seq)
            except (nats.errors.TimeoutError, nats.js.errors.NoStreamResponseError,
                    nats.js.errors.ServiceUnavailableError, nats.errors.ConnectionReconnectingError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(RETRY_PAUSE)

    async def listen(self, subject: str, wake: Callable[[], None]) -> Subscription:
        """Call ``wake`` for every message published on ``subject`` from now on (a core NATS
        subscription: JetStream delivers each stored message to core subscribers too)."""

        async def woken(_: Msg) -> None:
            wake()

        return await self.nc.subscribe(subject, cb=woken)

    async def purge(self, stream: str, subject: str) -> None:
        await self.js.purge_stream(stream, subject=subject)

    # ------------------------------------------------------------ reading

    async def last(self, subject: str, stream: str | None = None) -> Record | None:
        try:
            raw = await self.js.get_last_msg(stream or self.stream, subject)
        except nats.js.errors.NotFoundError:
            return None
        return Record(int(raw.seq or 0), str(raw.subject), raw.headers, raw.data or b"")

    async def get(self, seq: int, stream: str | None = None, *, subject: str | None = None) -> Record | None:
        """The message at ``seq``; with ``subject``, the first message of that subject at or
        after ``seq``."""
        try:
            if subject is None:
                raw = await self.js.get_msg(stream or self.stream, seq)
            else:
                raw = await self.js.get_msg(stream or self.stream, seq, subject=subject, next=True)
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
        order; at most ``limit`` of them."""
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
        sub = await self.js.pull_subscribe(subject, stream=stream, config=config)
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
                    records.append(
                        Record(msg.metadata.sequence.stream, msg.subject, msg.headers, msg.data)
                    )
            return records
        finally:
            await sub.unsubscribe()
            if name:
                await _delete_consumer(self.js, stream, name)


async def _logged(error: Exception) -> None:
    log.debug("nats: %s", error)


async def _delete_consumer(js: JetStreamContext, stream: str, name: str) -> None:
    # gone already, or removed by its inactivity threshold later
    with contextlib.suppress(nats.js.errors.NotFoundError, nats.errors.TimeoutError):
        await js.delete_consumer(stream, name)
