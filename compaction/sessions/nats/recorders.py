"""eventsourcing recorders on NATS JetStream: aggregate, application and tracking recorders.

Built the way eventsourcing's SQLite and PostgreSQL modules are: an infrastructure factory
(:class:`JetStreamFactory`, named by the ``PERSISTENCE_MODULE`` setting) constructs recorders that
share one connection. The recorders are synchronous, as eventsourcing wants; each call submits a
coroutine to the factory's private event loop (:class:`~compaction.sessions.nats.loop.LoopThread`)
and waits for it.

- **Aggregate recorder**: one subject per stream of events (``<stream>.s.<session hex>``), one
  commit message per save (:mod:`compaction.sessions.nats.frames`), published with
  ``Nats-Expected-Last-Subject-Sequence`` set to the sequence of the session's last commit: a
  writer that lost the race gets eventsourcing's :class:`IntegrityError`, as on PostgreSQL, and
  nothing of its save is visible.
- **Snapshots recorder**: the latest snapshot of each session in the key-value bucket
  ``<stream>_snapshots`` (:mod:`compaction.sessions.nats.snapshots`).
- **Application recorder**: the notification log is the stream's sequence of commit messages;
  a notification id is its commit's stream sequence times ``frames.ID_SPACE`` plus its index in
  the save, so ids follow the stream order without serialising saves of different sessions (not
  dense, as PostgreSQL's are not). A subscription is woken by every commit (:class:`JetStreamSubscription`);
  a named follower reads through a durable consumer (:meth:`JetStreamApplicationRecorder.follow_durably`).
- **Tracking recorder**: the highest processed notification id per application name, in the
  key-value bucket ``<stream>_tracking``, advanced only by compare-and-set on the key's revision.
- **Compaction leases**: :meth:`JetStreamFactory.compaction_leases`, the bucket ``<stream>_leases``
  (:mod:`compaction.sessions.nats.leases`).
"""

from __future__ import annotations

import contextlib
import time
from bisect import bisect_right
from collections.abc import Coroutine, Iterator, Sequence
from typing import Any, TypeVar
from uuid import UUID

import nats.errors
import nats.js.errors
from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    DatabaseError,
    DataError,
    InfrastructureFactory,
    IntegrityError,
    ListenNotifySubscription,
    Notification,
    NotSupportedError,
    OperationalError,
    ProcessRecorder,
    StoredEvent,
    Tracking,
    TrackingRecorder,
)
from eventsourcing.utils import Environment
from nats.js.kv import KeyValue

from compaction.errors import PerhapsStoredError
from compaction.sessions.nats import frames
from compaction.sessions.nats.buckets import (
    TRACKING,
    bucket_name,
    compare_and_set,
    open_bucket,
    read,
)
from compaction.sessions.nats.client import (
    MSG_ID,
    RETRY_FOR,
    WRONG_LAST_SEQUENCE,
    JetStreamLog,
    Record,
    retrying,
)
from compaction.sessions.nats.follow import DurableFollower
from compaction.sessions.nats.index import Head, HeadIndex
from compaction.sessions.nats.leases import JetStreamLeases
from compaction.sessions.nats.loop import LoopThread
from compaction.sessions.nats.shared import CONNECTIONS, Key
from compaction.sessions.nats.snapshots import JetStreamSnapshotRecorder
from compaction.sessions.nats.subjects import SCAN_BELOW, firsts, subject_counts

T = TypeVar("T")
EXPECTED_LAST_SUBJECT_SEQUENCE = "Nats-Expected-Last-Subject-Sequence"
_MAX_TAILS = 100_000
FEW_COMMITS = 32
"""Up to this many commits a read gets one by one; more are read in one consumer pass."""


class JetStreamConnection:
    """The event loop thread and the connected log every recorder of one factory shares."""

    def __init__(self, log: JetStreamLog) -> None:
        self.log = log
        self.runner = LoopThread()
        try:
            self.call(log.connect())
        except BaseException:
            self.runner.close()
            raise

    @property
    def where(self) -> str:
        return f"JetStream stream {self.log.stream!r} at {','.join(self.log.servers)}"

    @property
    def open(self) -> bool:
        """Whether its loop still runs (shared handles make a new connection when it does not)."""
        return self.runner.running

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop; NATS failures become eventsourcing persistence errors."""
        try:
            return self.runner.run(coroutine)
        except (IntegrityError, DataError, NotSupportedError):
            raise
        except nats.js.errors.APIError as e:
            raise DatabaseError(f"{self.where}: {e}") from e
        except (nats.errors.Error, TimeoutError, OSError) as e:
            raise OperationalError(f"{self.where}: {type(e).__name__} {e}".strip()) from e

    def close(self) -> None:
        if self.runner.running:
            with contextlib.suppress(Exception):
                self.runner.run(self.log.close())
            self.runner.close()


def _token(originator_id: UUID | str) -> str:
    return originator_id.hex if isinstance(originator_id, UUID) else UUID(str(originator_id)).hex


class JetStreamAggregateRecorder(AggregateRecorder):
    """Stored events of each originator on its own subject, one commit message per save, published
    with the expected last sequence of that subject only: saves of different sessions go through
    concurrently, and the stream's sequence orders them (:mod:`compaction.sessions.nats.frames`)."""

    def __init__(self, connection: JetStreamConnection) -> None:
        self.connection = connection
        self.log = connection.log
        self.chunk_stream = self.log.chunk_stream
        self.stream = self.log.stream
        self.prefix = f"{self.stream}.s."
        self.index = HeadIndex(self.log, self.stream)
        self._tails: dict[str, tuple[int, int]] = {}  # subject -> (its last commit's seq, last version)
        self._joined: tuple[int, list[frames.Row]] | None = None  # the last chunked commit read
        self._save_ids = frames.save_ids()

    def subject(self, originator_id: UUID | str) -> str:
        return self.prefix + _token(originator_id)

    # ------------------------------------------------------------ writing

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int]:
        if not stored_events:
            return []
        originators = {_token(e.originator_id) for e in stored_events}
        if len(originators) > 1:
            raise NotSupportedError(
                f"{self.connection.where}: one save holds the events of one originator (a subject); "
                f"found {len(originators)}"
            )
        if len(stored_events) > frames.ID_SPACE:
            raise NotSupportedError(
                f"{self.connection.where}: one save holds at most {frames.ID_SPACE} events; "
                f"found {len(stored_events)} (save in parts)"
            )
        rows = [(e.originator_version, e.topic, e.state) for e in stored_events]
        first = self.connection.call(self._append(self.subject(stored_events[0].originator_id), rows))
        return list(range(first, first + len(rows)))

    async def _append(self, subject: str, rows: list[frames.Row]) -> int:
        """Publish one save; the notification id of its first event."""
        save_id = next(self._save_ids)
        body, chunked = await self._body(rows, save_id)
        headers = frames.commit_headers(rows[0][0], len(rows), chunked)
        deadline = time.monotonic() + RETRY_FOR
        try:
            if subject not in self._tails:
                await self._refresh(subject, rows[0][0])
            while True:
                after = self._expect(subject, rows[0][0], headers)
                try:
                    seq = await self.log.publish(subject, body, headers, save_id)
                except (PerhapsStoredError, nats.js.errors.BadRequestError) as e:
                    if isinstance(e, PerhapsStoredError):  # stored by an unanswered attempt?
                        stored = await self._stored_as(subject, save_id, after)
                        if stored is not None:
                            self._remember(subject, stored.seq, rows[-1][0])
                            return frames.position(stored.headers, stored.seq)
                    elif e.err_code != WRONG_LAST_SEQUENCE:
                        raise
                    if time.monotonic() > deadline:
                        raise OperationalError(
                            f"{self.connection.where}: {subject}: no append got through in "
                            f"{RETRY_FOR:.0f} s of retries"
                        ) from e
                    await self._refresh(subject, rows[0][0])  # a stale tail, or another writer's save
                    continue
                self._remember(subject, seq, rows[-1][0])
                return frames.position(headers, seq)
        except BaseException as e:
            self._tails.pop(subject, None)
            # Only a refused commit is known not to be stored; after any other failure (a timeout)
            # it may be, and its chunks must stay (unreferenced chunks are merely never read).
            if chunked and isinstance(e, IntegrityError):
                with contextlib.suppress(Exception):
                    await self.log.purge(self.chunk_stream, self._chunk_subject(save_id))
            raise

    async def _stored_as(self, subject: str, save_id: str, after: int) -> Record | None:
        """The commit of ``subject`` after stream sequence ``after`` whose message id is
        ``save_id``, if an unanswered publish stored it."""
        for head in await self.log.scan(subject, after + 1, headers_only=True, stream=self.stream):
            if (head.headers or {}).get(MSG_ID) == save_id:
                return head
        return None

    def _expect(self, subject: str, first: int, headers: dict[str, str]) -> int:
        """Set the expected subject sequence in ``headers``; that sequence. Raises
        :class:`IntegrityError` when the session already holds version ``first``."""
        seq, last_version = self._tails[subject]
        if first <= last_version:
            raise IntegrityError(
                f"{subject}: version {first} is taken (the last stored version is {last_version})"
            )
        headers[EXPECTED_LAST_SUBJECT_SEQUENCE] = str(seq)
        return seq

    async def _refresh(self, subject: str, first: int) -> None:
        """The subject's last commit and version, as the leader holds them (the commits before
        the one that would hold version ``first`` are not read)."""
        index = await self.index.of(subject, above=first - 1)
        self._tails[subject] = (index.top_seq, index.top_version)

    def _remember(self, subject: str, seq: int, version: int) -> None:
        if len(self._tails) > _MAX_TAILS:
            self._tails.clear()
        self._tails[subject] = (seq, version)

    async def _body(self, rows: list[frames.Row], save_id: str) -> tuple[bytes, bool]:
        """The commit message's body: the rows, or the list of the chunks they were cut into."""
        body = frames.encode_rows(rows)
        room = self.log.max_payload - frames.HEADROOM
        if len(body) <= room:
            return body, False
        subject = self._chunk_subject(save_id)
        seqs = [
            await self.log.publish(subject, piece, {}, f"{save_id}.{index}")
            for index, piece in enumerate(frames.chunks(body, room))
        ]
        return frames.encode_chunk_list(seqs), True

    def _chunk_subject(self, save_id: str) -> str:
        return f"{self.chunk_stream}.{save_id}"

    # ------------------------------------------------------------ reading

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        found = self.connection.call(self._select(self.subject(originator_id), gt, lte, desc, limit))
        return [StoredEvent(originator_id, v, topic, state) for v, topic, state in found]

    async def _select(
        self, subject: str, gt: int | None, lte: int | None, desc: bool, limit: int | None
    ) -> list[frames.Row]:
        if limit == 0:
            return []
        found = await self.index.below_start(subject, gt, lte)
        if found is None:
            found = (await self.index.of(subject, covering=lte, above=gt)).overlapping(gt, lte)
        heads = _picked(found, desc, limit)
        if not heads:
            return []
        by_seq = {r.seq: r for r in await self._commits(subject, heads) if r is not None}
        rows: list[frames.Row] = []
        for head in heads:
            record = by_seq.get(head.seq)
            if record is None:  # the pass read every message up to the last head: not expected
                raise DataError(
                    f"{self.connection.where}: {subject}: the commit at stream sequence "
                    f"{head.seq} (versions {head.first}..{head.last}) was not read back"
                )
            rows.extend(_within(await self.rows_of(record), gt, lte))
        if desc:
            rows.reverse()
        return rows if limit is None else rows[:limit]

    def row_windows(
        self, originator_id: UUID | str, gt: int | None, lte: int | None, window: int
    ) -> Iterator[list[frames.Row]]:
        """The rows with ``gt < version <= lte`` in order, one commit at a time: the commits
        holding about ``window`` versions are fetched together (as :meth:`_commits` does), then
        each is decoded and its rows yielded before the next is decoded, so memory holds one
        fetched batch and one decoded commit. The commits are the ones the subject's index holds
        when the read begins (asked of the stream's leader when ``lte`` is beyond it)."""
        subject = self.subject(originator_id)
        heads = self.connection.call(self.index.of(subject, covering=lte, above=gt)).overlapping(gt, lte)
        while heads:
            batch = _window_of(heads, window)
            heads = heads[len(batch) :]
            records = self.connection.call(self._commits(subject, batch))
            by_seq = {r.seq: r for r in records if r is not None}
            for head in batch:
                record = by_seq.pop(head.seq, None)
                if record is None:
                    raise DataError(
                        f"{self.connection.where}: {subject}: the commit at stream sequence "
                        f"{head.seq} (versions {head.first}..{head.last}) was not read back"
                    )
                yield _within(self._decoded(record), gt, lte)

    def _decoded(self, record: Record) -> list[frames.Row]:
        """The rows of a commit already fetched: decoded here, with no hop to the loop, unless its
        chunks must be fetched first (a read of a session saved step by step decodes thousands of
        commits)."""
        if frames.is_chunked(record.headers):
            return self.connection.call(self.rows_of(record))
        return frames.decode_rows(record.data)

    async def _commits(self, subject: str, heads: list[Head]) -> list[Record | None]:
        """The commit messages of ``heads``: got one by one when they are few (a lazy load of a
        span), else in one ordered pass from the first to the last (a whole session)."""
        if len(heads) <= FEW_COMMITS:
            return await self.log.get_many([h.seq for h in heads], self.stream)
        wanted = {h.seq for h in heads}
        passed = await self.log.scan(subject, heads[0].seq, upto=heads[-1].seq, stream=self.stream)
        return [r for r in passed if r.seq in wanted]

    async def rows_of(self, record: Record) -> list[frames.Row]:
        """The rows a commit message holds (its chunks fetched and joined when chunked; the last
        chunked commit read is kept decoded: lazy loads of a large import read it piece by piece)."""
        body = record.data
        if frames.is_chunked(record.headers):
            if self._joined is not None and self._joined[0] == record.seq:
                return self._joined[1]
            seqs = frames.decode_chunk_list(body)
            pieces = []
            for seq, chunk in zip(seqs, await self.log.get_many(seqs, self.chunk_stream), strict=True):
                if chunk is None:
                    raise DataError(
                        f"{self.connection.where}: the save at stream sequence {record.seq} "
                        f"({record.subject}) lost its chunk at sequence {seq} of {self.chunk_stream}"
                    )
                pieces.append(chunk.data)
            rows = frames.decode_rows(b"".join(pieces))
            self._joined = (record.seq, rows)
            return rows
        return frames.decode_rows(body)

    # ------------------------------------------------------------ the index of originators

    def originator_ids(self, *, first_stored: bool) -> list[UUID]:
        """Originators in order of their first commit: every one, or (``first_stored``) only the
        ones whose version 0 is stored. The first commit of each subject the stream's leader
        lists, or, when sessions hold few commits, one pass over every commit's headers
        (:mod:`compaction.sessions.nats.subjects`)."""
        return self.connection.call(self._originators(first_stored))

    async def _originators(self, first_stored: bool) -> list[UUID]:
        counts = await subject_counts(self.log, self.prefix + ">", self.stream)
        if sum(counts.values()) >= SCAN_BELOW * len(counts):
            heads = await firsts(self.log, list(counts), self.stream)
            if not first_stored or all(frames.header_range(h.headers)[0] == 0 for h in heads):
                return self._originators_of(heads, first_stored=False)
            # a session whose first commit does not hold version 0 (rows deleted): read them all
        heads = await self.log.scan(self.prefix + ">", headers_only=True, stream=self.stream)
        return self._originators_of(heads, first_stored=first_stored)

    def _originators_of(self, heads: Sequence[Record], *, first_stored: bool) -> list[UUID]:
        """The originators of ``heads`` (commits in stream order), each at its first commit."""
        seen: dict[UUID, None] = {}
        for head in heads:
            if first_stored and frames.header_range(head.headers)[0] != 0:
                continue
            seen.setdefault(UUID(head.subject[len(self.prefix) :]), None)
        return list(seen)

    def count_below(self, originator_id: UUID | str, below: int) -> int:
        """How many stored versions of the originator are ``< below``."""
        return self.connection.call(self._count_below(self.subject(originator_id), below))

    def has_events(self, originator_id: UUID | str) -> bool:
        """Does the subject hold a commit? Asked of the stream's leader (a replica that lags, or a
        node restarting, is never taken for "no"); :class:`StoreUnavailableError` when no leader
        answers in time."""
        found = self.connection.call(self.log.last(self.subject(originator_id), self.stream))
        return found is not None

    async def _count_below(self, subject: str, below: int) -> int:
        held = self.index.cached(subject)
        if held is None or not held.complete or held.top_version < below - 1:
            contiguous = await self._contiguous_below(subject, below)
            if contiguous is not None:
                return contiguous
        index = await self.index.of(subject, covering=below - 1)
        return index.count_below(below)

    async def _contiguous_below(self, subject: str, below: int) -> int | None:
        """The versions below ``below`` the subject holds, from its first and last commit alone,
        when nothing was ever removed from the stream: each save appends the versions after the
        session's last one (its expected subject sequence checked by the leader), so the commits
        then hold the versions from 0 to the last without a gap. None when a message was removed
        (deleted, purged, aged out) or the first commit does not start at version 0: the
        commits' headers are read instead. A session saved step by step has tens of thousands."""
        info = await retrying(
            lambda: self.log.ask.stream_info(self.stream),
            unavailable=f"the state of {self.stream}",
            doubt_not_found=True,
        )
        state = info.state
        if state.first_seq > 1 or state.messages != state.last_seq:
            return None
        first = await self.log.get(1, self.stream, subject=subject)
        if first is not None and frames.header_range(first.headers)[0] != 0:
            return None
        top = await self.log.last(subject, self.stream)
        if first is None or top is None:
            return 0
        start, count = frames.header_range(top.headers)
        return min(below, start + count)


def _within(rows: list[frames.Row], gt: int | None, lte: int | None) -> list[frames.Row]:
    """The rows of one commit with a version in ``(gt, lte]``, found by bisection (a commit's
    versions increase): a lazy load of a span of a session imported in one save (a single commit
    of 250,000 rows, kept decoded) costs the span, not a pass over the whole commit."""
    lo = 0 if gt is None else bisect_right(rows, gt, key=_version)
    hi = len(rows) if lte is None else bisect_right(rows, lte, lo=lo, key=_version)
    return rows if (lo, hi) == (0, len(rows)) else rows[lo:hi]


def _version(row: frames.Row) -> int:
    return row[0]


def _picked(heads: list[Head], desc: bool, limit: int | None) -> list[Head]:
    """The commits a read with ``limit`` needs: the first ones, or (``desc``) the last ones,
    until they hold ``limit`` versions."""
    if limit is None:
        return heads
    picked: list[Head] = []
    count = 0
    for head in reversed(heads) if desc else heads:
        picked.append(head)
        count += head.count
        if count >= limit:
            break
    return picked[::-1] if desc else picked


def _window_of(heads: list[Head], window: int) -> list[Head]:
    """The first commits of ``heads`` that hold at most ``window`` versions together (at least
    one commit, however many it holds)."""
    count = 0
    for end, head in enumerate(heads):
        count += head.count
        if count > window and end:
            return heads[:end]
    return heads


class JetStreamSubscription(ListenNotifySubscription["JetStreamApplicationRecorder"]):
    """eventsourcing's listen/notify subscription, woken by a core NATS subscription to the
    session subjects (as PostgreSQL's by ``NOTIFY``): every commit wakes the puller, which selects
    what is new after its position. Listening starts after the first select has been queued, so
    the subscription pulls once more when it is in place: a commit in between is not missed."""

    def __init__(
        self, recorder: JetStreamApplicationRecorder, gt: int | None = None, topics: Sequence[str] = ()
    ) -> None:
        super().__init__(recorder=recorder, gt=gt, topics=topics)
        self._listening: Any = None
        try:
            self._listening = recorder.connection.call(
                recorder.log.listen(recorder.prefix + ">", self._has_been_notified.set)
            )
        except BaseException:
            self.stop()
            self._pull_thread.join()
            raise
        self._has_been_notified.set()

    def stop(self) -> None:
        super().stop()
        listening, self._listening = getattr(self, "_listening", None), None
        if listening is not None:
            with contextlib.suppress(Exception):
                self._recorder.connection.call(listening.unsubscribe())


class JetStreamApplicationRecorder(JetStreamAggregateRecorder, ApplicationRecorder):
    """The aggregate recorder plus the notification log: the stream's commit messages in order,
    each event's notification id its commit's position plus its index in the save."""

    backend_name = "nats"

    def __init__(self, connection: JetStreamConnection) -> None:
        super().__init__(connection)
        self._cursor: tuple[int, int] = (1, 1)  # (a notification id, the seq of the commit holding it)

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Notification]:
        lowest = (start or 0) + (0 if inclusive_of_start else 1)
        return self.connection.call(self._notifications(max(lowest, 1), limit, stop, topics))

    async def _notifications(
        self, lowest: int, limit: int, stop: int | None, topics: Sequence[str]
    ) -> list[Notification]:
        """Up to ``limit`` notifications from ``lowest``: the commits are fetched a few at first,
        then more (:meth:`JetStreamLog.records`), and decoded one at a time; the read stops at the
        commit that completes the page (or passes ``stop``), whatever the log holds after it."""
        found: list[Notification] = []
        seq = await self._seq_holding(lowest)
        if not seq or limit < 1:
            return found
        commits = self.log.records(self.prefix + ">", seq, first_fetch=min(limit, FEW_COMMITS))
        async with contextlib.aclosing(commits):
            async for record in commits:
                originator = UUID(record.subject[len(self.prefix) :])
                position = frames.position(record.headers, record.seq)
                rows = await self.rows_of(record)
                self._cursor = (position + len(rows), record.seq + 1)
                for index, (version, topic, state) in enumerate(rows):
                    nid = position + index
                    if stop is not None and nid > stop:
                        return found
                    if nid < lowest or (topics and topic not in topics):
                        continue
                    found.append(Notification(originator, version, topic, state, nid))
                    if len(found) == limit:
                        return found
        return found

    async def _seq_holding(self, notification: int) -> int:
        """The stream sequence of the commit holding ``notification`` (or of the first one after
        it); 0 when the log ends before it. Where the last read stopped is remembered; an id of a
        commit numbered by its sequence names that sequence; anywhere else (the commits of
        earlier versions, numbered densely) is found by bisecting the stream (ids grow with the
        sequence)."""
        known, at = self._cursor
        if known == notification:
            return at
        if notification >= frames.ID_SPACE:
            seq = notification // frames.ID_SPACE
            record = await self.log.get(seq)
            if record is not None and frames.POSITION not in (record.headers or {}):
                return seq if notification <= frames.last_id(record.headers, seq) else seq + 1
        top = await self.log.last(self.prefix + ">")
        if top is None:
            return 0
        lo, hi = 1, top.seq
        while lo < hi:
            mid = (lo + hi + 1) // 2
            record = await self.log.get(mid, subject=self.prefix + ">")
            if (
                record is None
                or record.seq > hi
                or frames.position(record.headers, record.seq) > notification
            ):
                hi = mid - 1
            else:
                lo = mid
        return lo

    def count_notifications(self, after: int, upto: int) -> int:
        """How many events have an id in ``(after, upto]`` (one headers-only pass over their commits)."""
        return self.connection.call(self._count(after, upto)) if upto > after else 0

    async def _count(self, after: int, upto: int) -> int:
        start = await self._seq_holding(after + 1)
        if not start:
            return 0
        total = 0
        heads = self.log.records(self.prefix + ">", start, headers_only=True, first_fetch=FEW_COMMITS)
        async with contextlib.aclosing(heads):  # stops at the first commit past ``upto``
            async for head in heads:
                first = frames.position(head.headers, head.seq)
                if first > upto:
                    break
                last = frames.last_id(head.headers, head.seq)
                total += max(0, min(last, upto) - max(first, after + 1) + 1)
        return total

    def subscribe(self, gt: int | None = None, topics: Sequence[str] = ()) -> JetStreamSubscription:
        return JetStreamSubscription(self, gt, topics)

    def follow_durably(self, name: str, gt: int | None = None) -> DurableFollower:
        """The notifications after ``gt`` from the durable consumer ``name``
        (:mod:`compaction.sessions.nats.follow`), acknowledged by the follower."""
        return DurableFollower(self, name, gt)

    def max_notification_id(self) -> int | None:
        last = self.connection.call(self.log.last(self.prefix + ">"))
        if last is None:
            return None
        return frames.last_id(last.headers, last.seq)


class JetStreamTrackingRecorder(TrackingRecorder):
    """Tracking positions in a key-value bucket: key = application name, value = the highest
    processed notification id; updated by compare-and-set on the key's revision."""

    def __init__(self, connection: JetStreamConnection) -> None:
        self.connection = connection
        self.bucket = bucket_name(connection.log, TRACKING)
        self._kv: KeyValue | None = None

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            self._kv = await open_bucket(self.connection.log, TRACKING)
        return self._kv

    def insert_tracking(self, tracking: Tracking) -> None:
        self.connection.call(self._insert(tracking))

    async def _insert(self, tracking: Tracking) -> None:
        kv = await self._bucket()
        key = _key(tracking.application_name)
        entry = await read(kv, key)
        current = int(entry.value or b"0") if entry is not None else None
        if current is not None and current >= tracking.notification_id:
            raise IntegrityError(
                f"tracking {tracking.application_name!r}: notification {tracking.notification_id} "
                f"is not after the recorded position {current}"
            )
        value = str(tracking.notification_id).encode()
        try:
            await compare_and_set(kv, key, value, None if entry is None else entry.revision)
        except nats.js.errors.KeyWrongLastSequenceError as e:
            raise IntegrityError(
                f"tracking {tracking.application_name!r}: another process "
                f"{'recorded a position first' if entry is None else 'moved the position'}"
            ) from e

    def max_tracking_id(self, application_name: str) -> int | None:
        return self.connection.call(self._max(application_name))

    async def _max(self, application_name: str) -> int | None:
        entry = await read(await self._bucket(), _key(application_name))
        return None if entry is None else int(entry.value or b"0")


def _key(application_name: str) -> str:
    """A key-value key for an application name (keys allow ``[-/_=.a-zA-Z0-9]``)."""
    return "".join(c if c.isascii() and (c.isalnum() or c in "-_=") else "_" for c in application_name)


class JetStreamFactory(InfrastructureFactory[JetStreamTrackingRecorder]):
    """eventsourcing infrastructure on JetStream. Settings: ``NATS_SERVERS`` (comma separated
    ``nats://HOST:PORT``), ``NATS_STREAM`` (default ``compaction``), ``NATS_REPLICAS`` (default 1),
    ``NATS_TIMEOUT`` (seconds per request, default 5)."""

    def __init__(self, env: Environment) -> None:
        super().__init__(env)
        servers = [s for s in (self.env.get("NATS_SERVERS") or "nats://127.0.0.1:4222").split(",") if s]
        stream = self.env.get("NATS_STREAM") or "compaction"
        replicas = int(self.env.get("NATS_REPLICAS") or 1)
        timeout = float(self.env.get("NATS_TIMEOUT") or 5)
        self._key: Key = (tuple(servers), stream, replicas, timeout)
        # One connection per process and stream (OperationalError when no server answers).
        self.connection = CONNECTIONS.acquire(
            self._key, lambda: JetStreamConnection(JetStreamLog(servers, stream, replicas, timeout))
        )
        self._leases: JetStreamLeases | None = None
        self._released = False

    def aggregate_recorder(self, purpose: str = "events") -> AggregateRecorder:
        if purpose == "snapshots":
            return JetStreamSnapshotRecorder(self.connection)
        return JetStreamAggregateRecorder(self.connection)

    def application_recorder(self) -> ApplicationRecorder:
        return JetStreamApplicationRecorder(self.connection)

    def tracking_recorder(
        self, tracking_recorder_class: type[JetStreamTrackingRecorder] | None = None
    ) -> JetStreamTrackingRecorder:
        return (tracking_recorder_class or JetStreamTrackingRecorder)(self.connection)

    def compaction_leases(self) -> JetStreamLeases:
        """The sessions' compaction leases, in the bucket ``<stream>_leases``."""
        if self._leases is None:
            self._leases = JetStreamLeases(self.connection)
        return self._leases

    def process_recorder(self) -> ProcessRecorder:
        """Not provided: a process application's new events and its tracking record must be
        written atomically, and a stream and a key-value bucket cannot be written together."""
        raise NotSupportedError(
            f"{self.connection.where}: process recorders need events and tracking in one atomic "
            "write, which JetStream does not offer; use PostgreSQL for process applications"
        )

    def close(self) -> None:
        """Release the shared connection, once, however often the factory is closed."""
        if not self._released:
            self._released = True
            CONNECTIONS.release(self._key, self.connection)


FACTORY_TOPIC = f"{__name__}:{JetStreamFactory.__name__}"
