"""The msgspec mapper: session events to stored rows and back.

eventsourcing 9.5's default ``Mapper`` serialises ``vars()`` through its JSON transcoder and cannot
handle msgspec Structs. This mapper stores ``topic`` = the event ``TYPE`` (a stable name, never a
Python path) and ``state`` = the event encoded with ``msgspec.json``; decoding uses one cached typed
decoder per type. Anything else (an aggregate event of another application, whose topic is a
Python path ``module:Class``) goes through eventsourcing's own ``Mapper`` code, so one mapper class
serves the session store and the applications beside it (``MAPPER_TOPIC`` =
:data:`SESSION_MAPPER_TOPIC`).

**Versions.** An event class whose ``class_version`` is above 1 stores it as the first key of its
payload (``{"class_version":2,...}``), as eventsourcing's mapper stores it in its event state; a row
without it is version 1. A row below its class's version is decoded to a dict, brought up by the
class's ``upcast_vN_vN+1`` static methods (:func:`~compaction.sessions.events.upcast_state`), then
decoded: on load, follow, copy and export alike, since every read of a stored row comes here.

**Unknown types.** A row whose type no code in this process knows decodes to an opaque
:class:`~compaction.sessions.events.UnknownEvent` (log-only, stored back byte for byte), unless the
mapper is strict (``strict_types``), when it raises :class:`~compaction.errors.UnknownEventTypeError`.
A row of an unknown type that declares a ``surface_op`` is never guessed at: it stays unreadable.

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

from compaction.errors import EventCompactionError, StoreError, UnknownEventTypeError
from compaction.sessions.events import SessionEvent, UnknownEvent, event_class, upcast_state
from compaction.sessions.session import SessionSnapshot

SESSION_MAPPER_TOPIC = "compaction.sessions.mapper:SessionMapper"
"""eventsourcing's ``MAPPER_TOPIC`` setting that makes an application (a follower of the session
store) decode session rows with this mapper."""
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


def stored_state(event: SessionEvent) -> tuple[str, bytes]:
    """The stored topic and payload of ``event``: its ``TYPE`` and JSON, ``class_version`` first
    when above 1; an :class:`UnknownEvent` gives back what was read."""
    if type(event) is UnknownEvent:
        return event.event_type, event.payload
    state = _ENCODER.encode(event)
    version = event.class_version
    if version > 1:
        state = b'{"class_version":%d,' % version + state[1:] if len(state) > 2 else state
    return event.TYPE, state


def decode_event(event_type: str, payload: bytes, where: str = "") -> SessionEvent:
    return _decode(event_type, payload, lambda: where)


_TYPE_DECODERS: dict[str, msgspec.json.Decoder[Any]] = {}
"""Typed decoders of the version-1 types: the hot path (a versioned type never enters it)."""
_VERSION_KEY = b'{"class_version":'


def _decode(
    event_type: str, payload: bytes, where: Callable[[], str], *, strict: bool = True
) -> SessionEvent:
    """Decode one payload; ``where`` is only rendered when something is wrong (hot path)."""
    decoder = _TYPE_DECODERS.get(event_type)
    if decoder is None or payload.startswith(_VERSION_KEY):
        return _decode_versioned(event_type, payload, where, strict)
    try:
        event: SessionEvent = decoder.decode(payload)
    except msgspec.DecodeError as e:
        raise _undecodable(event_type, where, e) from e
    return event


def _undecodable(event_type: str, where: Callable[[], str], error: Exception) -> StoreError:
    location = where()
    return StoreError(f"cannot decode {event_type} payload{' at ' + location if location else ''}: {error}")


def _decode_versioned(
    event_type: str, payload: bytes, where: Callable[[], str], strict: bool
) -> SessionEvent:
    """The slow path: the class resolved (or the row kept opaque), the row upcast when its
    ``class_version`` is below the class's."""
    try:
        cls = event_class(event_type, where())
    except UnknownEventTypeError:
        if strict:
            raise
        return _unknown(event_type, payload, where)
    decoder = _decoder(cls)
    if cls.class_version == 1 and not payload.startswith(_VERSION_KEY):
        _TYPE_DECODERS[event_type] = decoder
    elif not payload.startswith(b'{"class_version":%d,' % cls.class_version):
        try:
            state = msgspec.json.decode(payload)
        except msgspec.DecodeError as e:
            raise _undecodable(event_type, where, e) from e
        if not isinstance(state, dict):
            raise _undecodable(event_type, where, ValueError("expected a JSON object"))
        payload = _ENCODER.encode(upcast_state(cls, state))
    try:
        event: SessionEvent = decoder.decode(payload)
    except msgspec.DecodeError as e:
        raise _undecodable(event_type, where, e) from e
    return event


class _Envelope(msgspec.Struct):
    """What the log needs of a row nobody can decode: its position, time and surface claim."""

    seq: int
    time: Any = None
    surface_op: Any = None
    source_event_seqs: Any = None


_ENVELOPE_DECODER = msgspec.json.Decoder(_Envelope)


def _opaque_refused(event_type: str, where: Callable[[], str], why: str) -> UnknownEventTypeError:
    location = where()
    return UnknownEventTypeError(event_type, f"{location}{'; ' if location else ''}{why}")


def _unknown(event_type: str, payload: bytes, where: Callable[[], str]) -> UnknownEvent:
    try:
        envelope = _ENVELOPE_DECODER.decode(payload)
        known = {"seq": envelope.seq, "time": envelope.time}
        event = msgspec.json.decode(
            _ENCODER.encode({k: v for k, v in known.items() if v is not None}), type=SessionEvent
        )
    except msgspec.DecodeError as e:
        raise _opaque_refused(event_type, where, f"its payload is not an event ({e})") from e
    if envelope.surface_op is not None or envelope.source_event_seqs is not None:
        raise _opaque_refused(
            event_type,
            where,
            "the row claims a place on the surface, which this process cannot fold without its class",
        )
    return UnknownEvent(seq=event.seq, time=event.time, event_type=event_type, payload=payload)


class SessionMapper(Mapper[UUID]):
    strict_types: bool = False
    """Refuse rows of unknown types (:class:`UnknownEventTypeError`) instead of reading them as
    :class:`UnknownEvent` (set by ``SessionStore.open(strict_types=True)``)."""

    def stored_event(self, session_id: UUID, event: SessionEvent) -> StoredEvent:
        """The stored row of one session event (``originator_version`` = its seq)."""
        return self._stored(session_id, event.seq, *stored_state(event))

    def to_stored_event(self, domain_event: Any) -> StoredEvent:
        if isinstance(domain_event, EventEnvelope):
            topic, state = stored_state(domain_event.event)
        elif isinstance(domain_event, SnapshotEnvelope):
            topic, state = SNAPSHOT_TOPIC, _SNAPSHOT_ENCODER.encode(domain_event.snapshot)
        elif isinstance(domain_event, msgspec.Struct):
            raise StoreError(f"cannot store {type(domain_event).__qualname__}: not a session event")
        else:  # another application's aggregate event, the eventsourcing way
            return super().to_stored_event(domain_event)
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
        if (
            decoder is not None
            and not (self.cipher or self.compressor)
            and not state.startswith(_VERSION_KEY)
        ):  # the hot path
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
        event = _decode(topic, state, where, strict=self.strict_types)
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
        if ":" in stored_event.topic:  # a Python topic: another application's aggregate event
            return super().to_domain_event(stored_event)
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
