"""A follower of the notification log on a durable JetStream pull consumer.

A named follower (the projection runner: ``compaction rebuild --follow``) reads the commit messages
of ``<stream>`` through a durable consumer of that name, filtered to the session subjects, with
acknowledgement policy *all*: acknowledging a commit acknowledges every commit delivered before it.
The follower acknowledges a commit only once every event it holds is in the follower's tracking
record (:meth:`DurableFollower.acknowledge`, called after the tracking record is written), so the
consumer's acknowledgement floor never passes what the follower has recorded, and the consumer on
the server shows how far the follower is (``nats consumer info``: its pending count is its lag).

When a follower starts, it resumes from its tracked position ``p``: the consumer must deliver next
the commit holding notification ``p + 1``. A consumer that would (every delivered commit
acknowledged, the next one that commit) is kept; any other (none yet, or one with deliveries
outstanding from a follower that was killed, or whose floor is past ``p`` because the views were
rebuilt) is deleted and created anew with ``DeliverPolicy.BY_START_SEQUENCE`` at that commit's
stream sequence. Events at or below ``p`` in the first commit are skipped, so each event is handed
to the follower once per start, in order. Commits are fetched in batches and decoded one at a time,
when the follower has taken every event of the one before: memory holds one fetched batch and one
decoded commit, however far behind the follower starts.

The stream ``<stream>`` holds commit messages only (:mod:`compaction.sessions.nats.frames`), so
its sequence is dense over commits: a commit delivered past the next expected sequence means
another follower pulls from the same consumer (one follower per views): that is refused with
:class:`DataError` instead of skipping events.
"""

from __future__ import annotations

import contextlib
from collections import deque
from typing import Any
from uuid import UUID

import nats.errors
import nats.js.errors
from eventsourcing.persistence import DataError, Notification, Subscription
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, ConsumerInfo, DeliverPolicy
from nats.js.client import JetStreamContext

from compaction.sessions.nats import frames
from compaction.sessions.nats.client import FETCH_BATCH, Record, retrying

FETCH_WAIT = 0.5
"""Seconds a fetch waits for a new commit: how soon :meth:`DurableFollower.stop` takes effect."""
MAX_ACK_PENDING = 20_000


def consumer_name(name: str) -> str:
    """A durable consumer name for ``name`` (consumer names allow no ``.``, ``*``, ``>`` or space)."""
    cleaned = "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "_" for c in name)
    return cleaned[:200] or "follower"


class DurableFollower(Subscription[Any]):
    """eventsourcing's subscription interface over a durable pull consumer (see the module)."""

    def __init__(self, recorder: Any, name: str, gt: int | None = None) -> None:
        super().__init__(recorder=recorder, gt=gt)
        self.name = consumer_name(name)
        self._connection = recorder.connection
        self._log = recorder.log
        self._next_id = (gt or 0) + 1
        self._next_seq = 0  # the stream sequence of the next commit (known once the consumer is open)
        self._ready: deque[Notification] = deque()  # the events of the commit being handed out
        self._fetched: deque[Msg] = deque()  # fetched commits, not decoded yet
        self._delivered: deque[tuple[int, Msg]] = deque()  # (its last notification id, commit)
        self._sub: JetStreamContext.PullSubscription = self._connection.call(self._open())

    # ------------------------------------------------------------ the consumer

    async def _open(self) -> JetStreamContext.PullSubscription:
        stream = self._log.stream
        start = self._next_seq = await self._start_seq()
        info = await self._info()
        if info is None or not _resumes_at(info, start):
            if info is not None:
                await retrying(lambda: self._log.ask.delete_consumer(stream, self.name))
            config = ConsumerConfig(
                durable_name=self.name,
                filter_subject=self._recorder.prefix + ">",
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=start,
                ack_policy=AckPolicy.ALL,
                max_ack_pending=MAX_ACK_PENDING,
            )
            await retrying(lambda: self._log.js.add_consumer(stream, config))
        return await retrying(lambda: self._log.js.pull_subscribe_bind(self.name, stream=stream))

    async def _info(self) -> ConsumerInfo | None:
        try:
            return await retrying(lambda: self._log.ask.consumer_info(self._log.stream, self.name))
        except nats.js.errors.NotFoundError:
            return None

    async def _start_seq(self) -> int:
        """The stream sequence of the commit holding notification ``next_id`` (one past the last
        commit when the log ends before it)."""
        seq = int(await self._recorder._seq_holding(self._next_id))
        if seq == 0:
            return 1
        record = await self._log.get(seq)
        if record is not None and frames.last_id(record.headers, record.seq) < self._next_id:
            return seq + 1
        return seq

    # ------------------------------------------------------------ reading

    def __next__(self) -> Notification:
        while not self._ready:
            if self._has_been_stopped:
                raise StopIteration
            if self._fetched:  # decode the next commit only when the last one is handed out
                self._connection.call(self._take(self._fetched.popleft()))
            else:
                self._connection.call(self._pull())
        return self._ready.popleft()

    async def _pull(self) -> None:
        try:
            messages = await self._sub.fetch(FETCH_BATCH, timeout=FETCH_WAIT)
        except (nats.errors.TimeoutError, TimeoutError):
            return
        self._fetched.extend(messages)

    async def _take(self, msg: Msg) -> None:
        seq = msg.metadata.sequence.stream
        record = Record(seq, msg.subject, msg.headers, msg.data)
        first = frames.position(record.headers, record.seq)
        if seq > self._next_seq:
            raise DataError(
                f"{self._connection.where}: durable consumer {self.name!r} delivered the commit at "
                f"stream sequence {seq} when the commit at {self._next_seq} was next: another "
                "follower pulls from the same consumer (run one follower per views)"
            )
        self._next_seq = max(self._next_seq, seq + 1)
        rows = await self._recorder.rows_of(record)
        originator = UUID(record.subject[len(self._recorder.prefix) :])
        for index, (version, topic, state) in enumerate(rows):
            nid = first + index
            if nid >= self._next_id:
                self._ready.append(Notification(originator, version, topic, state, nid))
        self._next_id = max(self._next_id, first + len(rows))
        self._delivered.append((first + len(rows) - 1, msg))

    # ------------------------------------------------------------ acknowledging

    def acknowledge(self, notification_id: int) -> None:
        """Every event up to ``notification_id`` is in the follower's tracking record: acknowledge
        the newest delivered commit that holds nothing after it (and with it, those before)."""
        newest: Msg | None = None
        while self._delivered and self._delivered[0][0] <= notification_id:
            newest = self._delivered.popleft()[1]
        if newest is not None:
            message = newest
            self._connection.call(_ack(message))

    def stop(self) -> None:
        super().stop()  # the fetch under way ends within FETCH_WAIT

    def __exit__(self, *args: object, **kwargs: Any) -> None:
        super().__exit__(*args, **kwargs)
        with contextlib.suppress(Exception):  # the consumer itself stays, durable
            self._connection.call(self._sub.unsubscribe())


async def _ack(message: Msg) -> None:
    with contextlib.suppress(nats.errors.TimeoutError, nats.errors.Error):
        await message.ack_sync(timeout=2.0)  # unacknowledged: redelivered, and skipped


def _resumes_at(info: ConsumerInfo, start: int) -> bool:
    """The consumer delivers ``start`` next and has nothing outstanding."""
    delivered = info.delivered.stream_seq if info.delivered else 0
    floor = info.ack_floor.stream_seq if info.ack_floor else 0
    return not info.num_ack_pending and delivered == floor and (delivered or 0) + 1 == start
