"""Session snapshots in the JetStream key-value bucket ``<stream>_snapshots``, one key per session.

A snapshot is a cache of a session's fold: the log stays the truth, and a load without a usable
snapshot replays the events. The bucket keeps the latest snapshot of each session (history 1); its
value (:class:`Pointer`) names the snapshot's version (the session length it covers), its topic,
the SHA-256 digest and size of its body, and the body itself when it fits in one message.

A larger body (a session of many megabytes snapshots to more than the server's maximum payload) is
published first as chunks on ``<stream>_chunks.snap.<session>.<snapshot id>`` (the chunk stream of
large saves), and the key's value then lists their stream sequences. The pointer is written only
after every chunk is acknowledged, by compare-and-set on the key's revision, so a reader that finds
a pointer finds its whole body; it joins the chunks and checks the digest before decoding. The
previous snapshot's chunks are purged once the new pointer is in place: a reader still holding the
old pointer then misses a chunk, reads the key again and takes the new snapshot (a reader never sees
a partial snapshot: it gets a whole one whose digest matches, or none and replays).

Two handles snapshotting one session race on the key's revision: a snapshot older than the stored
one is dropped (the newer one serves every load), one of the same version is refused with
eventsourcing's :class:`IntegrityError` (as the unique key of a snapshots table refuses it).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Sequence
from typing import Any
from uuid import UUID, uuid4

import msgspec
import nats.js.errors
from eventsourcing.persistence import AggregateRecorder, IntegrityError, StoredEvent
from nats.js.kv import KeyValue

from compaction.sessions.nats import frames
from compaction.sessions.nats.buckets import (
    SNAPSHOTS,
    Entry,
    bucket_name,
    compare_and_set,
    open_bucket,
    read,
)
from compaction.sessions.nats.client import JetStreamLog

log = logging.getLogger("compaction.store.nats")
RACE_ATTEMPTS = 8
"""Times a snapshot write re-reads the key after another handle moved it."""


class Pointer(msgspec.Struct, frozen=True, array_like=True):
    """A key's value: the snapshot, or where its body is."""

    version: int
    topic: str
    digest: str  # SHA-256 of the body, hex
    size: int
    snapshot_id: str
    body: bytes | None = None  # the body, when it fits in the value
    chunks: list[int] | None = None  # else the stream sequences of its chunks, in order


_POINTER = msgspec.msgpack.Decoder(Pointer)
POINTER_ROOM = 512
"""Bytes of a value kept for the pointer's fields besides an inline body."""


def _token(originator_id: UUID | str) -> str:
    return originator_id.hex if isinstance(originator_id, UUID) else UUID(str(originator_id)).hex


class JetStreamSnapshotRecorder(AggregateRecorder):
    """eventsourcing's snapshots recorder on the ``<stream>_snapshots`` bucket (see the module)."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection  # a JetStreamConnection (recorders.py imports this module)
        self.log: JetStreamLog = connection.log
        self.bucket = bucket_name(self.log, SNAPSHOTS)
        self._kv: KeyValue | None = None

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            self._kv = await open_bucket(self.log, SNAPSHOTS)
        return self._kv

    # ------------------------------------------------------------ writing

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
        latest: dict[str, StoredEvent] = {}
        for event in stored_events:
            key = _token(event.originator_id)
            if key not in latest or event.originator_version > latest[key].originator_version:
                latest[key] = event
        for key, event in latest.items():
            self.connection.call(self._put(key, event))
        return None

    async def _put(self, key: str, event: StoredEvent) -> None:
        kv = await self._bucket()
        snapshot_id = uuid4().hex
        pointer: Pointer | None = None
        for _ in range(RACE_ATTEMPTS):
            current = await read(kv, key)
            stored = _decode(current)
            if stored is not None and stored.version >= event.originator_version:
                if stored.version == event.originator_version:
                    raise IntegrityError(
                        f"{self.connection.where}: bucket {self.bucket}: session {key} already "
                        f"has its snapshot at version {stored.version}"
                    )
                return  # a newer snapshot is stored: it serves every load this one would
            if pointer is None:
                pointer = await self._pointer(key, event, snapshot_id)
            try:
                await compare_and_set(
                    kv, key, msgspec.msgpack.encode(pointer), None if current is None else current.revision
                )
            except nats.js.errors.KeyWrongLastSequenceError:
                continue  # another handle snapshotted the session meanwhile: look again
            if stored is not None and stored.chunks:
                await self._purge(key, stored.snapshot_id)
            return
        if pointer is not None and pointer.chunks:
            await self._purge(key, snapshot_id)
        raise IntegrityError(
            f"{self.connection.where}: bucket {self.bucket}: session {key}: other handles moved "
            f"the snapshot key {RACE_ATTEMPTS} times in a row; this snapshot was not stored"
        )

    async def _pointer(self, key: str, event: StoredEvent, snapshot_id: str) -> Pointer:
        """The pointer of ``event``'s body, its chunks published first when it does not fit."""
        body = event.state
        digest = hashlib.sha256(body).hexdigest()
        version, topic = event.originator_version, event.topic
        room = self.log.max_payload - frames.HEADROOM
        if len(body) + POINTER_ROOM <= room:
            return Pointer(version, topic, digest, len(body), snapshot_id, body=body)
        subject = self._chunk_subject(key, snapshot_id)
        seqs = [
            await self.log.publish(subject, piece, {}, f"{snapshot_id}.{index}")
            for index, piece in enumerate(frames.chunks(body, room))
        ]
        return Pointer(version, topic, digest, len(body), snapshot_id, chunks=seqs)

    def _chunk_subject(self, key: str, snapshot_id: str) -> str:
        return f"{self.log.chunk_stream}.snap.{key}.{snapshot_id}"

    async def _purge(self, key: str, snapshot_id: str) -> None:
        with contextlib.suppress(Exception):  # unreferenced chunks are merely never read
            await self.log.purge(self.log.chunk_stream, self._chunk_subject(key, snapshot_id))

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
        """The session's snapshot when its version is in ``(gt, lte]`` (the bucket keeps only the
        latest: an older version asked for is not there, and the load replays instead)."""
        if limit == 0:
            return []
        found = self.connection.call(self._latest(_token(originator_id)))
        if found is None:
            return []
        version, topic, body = found
        if (gt is not None and version <= gt) or (lte is not None and version > lte):
            return []
        return [StoredEvent(originator_id, version, topic, body)]

    async def _latest(self, key: str) -> tuple[int, str, bytes] | None:
        """The latest snapshot's version, topic and whole body; None when there is none, or none
        whose body is whole (read twice: the first read may race the next snapshot's purge)."""
        kv = await self._bucket()
        pointer = None
        for _ in range(2):
            pointer = _decode(await read(kv, key))
            if pointer is None:
                return None
            body = await self._body(pointer)
            if body is not None:
                return pointer.version, pointer.topic, body
        assert pointer is not None
        log.warning(
            "%s: bucket %s: the snapshot of session %s at version %d has no whole body (a chunk is "
            "missing or its digest differs); loading replays the events instead",
            self.connection.where, self.bucket, key, pointer.version,
        )  # fmt: skip
        return None

    async def _body(self, pointer: Pointer) -> bytes | None:
        if pointer.body is not None:
            body = pointer.body
        else:
            pieces = []
            for seq in pointer.chunks or ():
                chunk = await self.log.get(seq, self.log.chunk_stream)
                if chunk is None:
                    return None
                pieces.append(chunk.data)
            body = b"".join(pieces)
        if len(body) != pointer.size or hashlib.sha256(body).hexdigest() != pointer.digest:
            return None
        return body


def _decode(entry: Entry | None) -> Pointer | None:
    if entry is None or not entry.value:
        return None
    try:
        return _POINTER.decode(entry.value)
    except msgspec.DecodeError:
        return None  # not a pointer: treated as no snapshot, the next one replaces it
