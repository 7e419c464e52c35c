"""The msgspec mapper: session events to stored rows and back.

eventsourcing 9.5's default ``Mapper`` serialises ``vars()`` through its JSON transcoder and cannot
handle msgspec Structs. This mapper stores ``topic`` = the event ``TYPE`` (a stable name, never a
Python path) and ``state`` = the event encoded with ``msgspec.json``; decoding uses one cached typed
decoder per type. An unknown type raises :class:`~compaction.errors.UnknownEventTypeError`.

It is the one decoder of stored rows: the store reads every row through it, strictly
(:meth:`SessionMapper.decode_row`) or tolerantly (:meth:`SessionMapper.read_row`, which turns a row
that does not decode into an :class:`UnreadableRow`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID

import msgspec
from eventsourcing.persistence import Mapper, StoredEvent

from compaction.errors import EventCompactionError, StoreError
from compaction.sessions.events import SessionEvent, event_class
from compaction.sessions.session import SessionSnapshot

SNAPSHOT_TOPIC = "session/snapshot@2"  # msgpack, packed surface
OLD_SNAPSHOT_TOPICS = frozenset({"session/snapshot"})  # ignored on load: the session is replayed


class EventEnvelope(msgspec.Struct, frozen=True):
    """A session event addressed to its stream (satisfies eventsourcing's domain event protocol)."""

    originator_id: UUID
    originator_version: int
    event: SessionEvent


class UnreadableRow(msgspec.Struct, frozen=True):
    """A stored row that does not decode: its position (``seq``), its event type and why."""

    seq: int
    type: str
    reason: str


StoredRow = SessionEvent | UnreadableRow
"""A stored row read tolerantly: its event, or what made it unreadable."""


class SnapshotEnvelope(msgspec.Struct, frozen=True):
    originator_id: UUID
    originator_version: int
    snapshot: SessionSnapshot


_ENCODER = msgspec.json.Encoder()
_SNAPSHOT_ENCODER = msgspec.msgpack.Encoder()
_SNAPSHOT_DECODER = msgspec.msgpack.Decoder(SessionSnapshot)
_DECODERS: dict[type[Any], msgspec.json.Decoder[Any]] = {}


def _decoder(cls: type[Any]) -> msgspec.json.Decoder[Any]:
    decoder = _DECODERS.get(cls)
    if decoder is None:
        decoder = _DECODERS[cls] = msgspec.json.Decoder(cls)
    return decoder


def encode_event(event: SessionEvent) -> bytes:
    return _ENCODER.encode(event)


def decode_event(event_type: str, payload: bytes, where: str = "") -> SessionEvent:
    return _decode(event_type, payload, lambda: where)


_TYPE_DECODERS: dict[str, msgspec.json.Decoder[Any]] = {}


def _decode(event_type: str, payload: bytes, where: Callable[[], str]) -> SessionEvent:
    """Decode one payload; ``where`` is only rendered when something is wrong (hot path)."""
    decoder = _TYPE_DECODERS.get(event_type)
    if decoder is None:
        decoder = _TYPE_DECODERS[event_type] = _decoder(event_class(event_type, where()))
    try:
        event: SessionEvent = decoder.decode(payload)
    except msgspec.DecodeError as e:
        location = where()
        raise StoreError(
            f"cannot decode {event_type} payload{' at ' + location if location else ''}: {e}"
        ) from e
    return event


class SessionMapper(Mapper[UUID]):
    def stored_event(self, session_id: UUID, event: SessionEvent) -> StoredEvent:
        """The stored row of one session event (``originator_version`` = its seq)."""
        return self._stored(session_id, event.seq, event.TYPE, _ENCODER.encode(event))

    def to_stored_event(self, domain_event: Any) -> StoredEvent:
        if isinstance(domain_event, EventEnvelope):
            topic, state = domain_event.event.TYPE, _ENCODER.encode(domain_event.event)
        elif isinstance(domain_event, SnapshotEnvelope):
            topic, state = SNAPSHOT_TOPIC, _SNAPSHOT_ENCODER.encode(domain_event.snapshot)
        else:
            raise StoreError(f"cannot store {type(domain_event).__qualname__}: not a session event")
        return self._stored(domain_event.originator_id, domain_event.originator_version, topic, state)

    def _stored(self, originator_id: UUID, version: int, topic: str, state: bytes) -> StoredEvent:
        if self.compressor:
            state = self.compressor.compress(state)
        if self.cipher:
            state = self.cipher.encrypt(state)
        return StoredEvent(originator_id=originator_id, originator_version=version, topic=topic, state=state)

    def _state(self, state: bytes) -> bytes:
        if self.cipher:
            state = self.cipher.decrypt(state)
        if self.compressor:
            state = self.compressor.decompress(state)
        return state

    def decode_event(self, stored: StoredEvent) -> SessionEvent:
        return self.decode_row(stored.originator_id, stored.originator_version, stored.topic, stored.state)

    def decode_row(self, originator_id: object, version: int, topic: str, state: bytes) -> SessionEvent:
        """Decode one stored row of stream ``originator_id`` at position ``version``."""
        decoder = _TYPE_DECODERS.get(topic)
        if decoder is not None and not (self.cipher or self.compressor):  # the hot path
            try:
                event: SessionEvent = decoder.decode(state)
            except msgspec.DecodeError:
                pass  # the slow path below says what is wrong, and where
            else:
                if event.seq == version:
                    return event
        return self._decode_row(originator_id, version, topic, state)

    def _decode_row(self, originator_id: object, version: int, topic: str, state: bytes) -> SessionEvent:
        def where() -> str:
            return f"session {originator_id} seq {version}"

        if self.cipher or self.compressor:
            state = self._state(state)
        event = _decode(topic, state, where)
        if event.seq != version:
            raise StoreError(
                f"stored event at {where()} carries seq {event.seq}; the stored payload does not "
                "match its position (tampered or corrupt row)"
            )
        return event

    def read_row(self, originator_id: object, version: int, topic: str, state: bytes) -> StoredRow:
        """:meth:`decode_row`, tolerant: a row that does not decode becomes an
        :class:`UnreadableRow` naming its seq, type and the reason."""
        try:
            return self.decode_row(originator_id, version, topic, state)
        except EventCompactionError as e:
            return UnreadableRow(version, topic, str(e))

    def decode_snapshot(self, stored: StoredEvent) -> SessionSnapshot | None:
        """The snapshot, or None for a snapshot in an older layout (the caller replays instead)."""
        if stored.topic in OLD_SNAPSHOT_TOPICS:
            return None
        try:
            snapshot: SessionSnapshot = _SNAPSHOT_DECODER.decode(self._state(stored.state))
        except msgspec.DecodeError as e:
            raise StoreError(
                f"cannot decode the snapshot of session {stored.originator_id} at length "
                f"{stored.originator_version}: {e}"
            ) from e
        return snapshot

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        originator_id = stored_event.originator_id
        if not isinstance(originator_id, UUID):
            originator_id = UUID(str(originator_id))
        if stored_event.topic == SNAPSHOT_TOPIC or stored_event.topic in OLD_SNAPSHOT_TOPICS:
            snapshot = self.decode_snapshot(stored_event)
            if snapshot is None:
                raise StoreError(
                    f"snapshot of session {originator_id} at length {stored_event.originator_version} "
                    "has an older layout; reload the session from its events"
                )
            return SnapshotEnvelope(originator_id, stored_event.originator_version, snapshot)
        return EventEnvelope(originator_id, stored_event.originator_version, self.decode_event(stored_event))
