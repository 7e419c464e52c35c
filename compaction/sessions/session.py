"""Session: one session's event stream, its append rules, and what the model sees.

A session is a pure fold over its log: the :class:`~compaction.sessions.surface.Surface`, the turn/step
:class:`~compaction.sessions.structure.Structure`, and a few counters. :meth:`Session.append` validates an
event against all of them before it enters the log, so a rejected event leaves everything unchanged.
Appended events stay *pending* until a :class:`~compaction.sessions.store.SessionStore` saves them.

Sessions loaded from a snapshot keep only the fold state in memory and fetch event payloads lazily
(``loader``) when a caller asks for them, so loading the latest state of a long session is cheap.
"""

from __future__ import annotations

import functools
import sys
from array import array
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID, uuid4

import msgspec

from compaction.errors import SessionStateError, StoreError
from compaction.sessions.blocks import Message
from compaction.sessions.collector import collector_paused
from compaction.sessions.events import (
    APPEND,
    FROZEN_CHECKS,
    UNSET_SEQ,
    UNSET_TIME,
    AssistantMessage,
    Replace,
    RequestHeader,
    SessionEvent,
    SessionInvariants,
    UserMessage,
    freeze_struct,
    now_utc,
)
from compaction.sessions.ids import SessionKey, session_uuid
from compaction.sessions.invariants import Rule, invariant_rule
from compaction.sessions.structure import Structure, StructureState
from compaction.sessions.surface import (
    DELTA_CODE,
    NODE_CODE,
    Mark,
    PackedInts,
    Plan,
    Surface,
    check_message_shape,
    packed,
)

Validator = Callable[["Session", SessionEvent], None]
"""An extra pre-commit rule: raise an :class:`EventRuleError` subclass to reject the event."""

EventLoader = Callable[[int, int], Sequence[SessionEvent]]
"""Fetch the stored events with ``lo <= seq < hi`` (used by sessions restored from a snapshot)."""

EventPicker = Callable[[int, int, Container[int]], Sequence[SessionEvent]]
"""Fetch the stored events with ``lo <= seq < hi`` whose seq is in the container (the others are
not decoded): :meth:`Session.preload`."""

PICK_CHUNK = 8192
"""Seqs one store read of :meth:`Session.preload` asks for at most."""

LOAD_CHUNK = 2048
FIRST_CHUNK = 16
"""Events the first lazy load of a restored session fetches; each later load fetches twice as many,
up to :data:`LOAD_CHUNK` (a reader going through the log soon reads in full chunks)."""


class SessionSnapshot(msgspec.Struct, frozen=True):
    """Everything the fold needs to continue after ``length`` events, without the events.

    The surface travels packed (little-endian int64 seqs, int32 deltas): a surface of 40,000 nodes
    decodes in a fraction of the time a JSON list of integers takes."""

    length: int
    nodes: bytes
    deltas: bytes
    generation: int
    structure: StructureState
    last_by_type: dict[str, int]
    type_counts: dict[str, int]
    first_user_seq: int | None
    prices: dict[str, bytes] = msgspec.field(default_factory=dict)
    """Node prices by meter (:attr:`Session.price_columns`), packed int64 in surface order: a meter
    restored with the session measures it without pricing a node (absent in older snapshots)."""
    readings: dict[str, bytes] = msgspec.field(default_factory=dict)
    """What the layers above read of the session, by name (:attr:`Session.readings`), encoded by
    them and opaque here (absent in older snapshots)."""


@dataclass(frozen=True, slots=True)
class SessionMark:
    """The fold state :meth:`Session.rollback` (and a rejected ``append_all``) restores."""

    length: int
    surface: Mark
    structure: StructureState
    last_by_type: dict[str, int]
    type_counts: dict[str, int]
    first_user_seq: int | None


class Session:
    """One session's log and its folds. Not thread-safe: one writer per session object.

    ``validators`` are this session's extra pre-commit rules (run after the surface and structure
    rules, in order); they belong to the object, so one session's rules never leak into another's."""

    strict_structure: bool = True

    def __init__(
        self,
        session_id: SessionKey | None = None,
        *,
        strict_structure: bool = True,
        clock: Callable[[], datetime] = now_utc,
        validators: Iterable[Validator] = (),
        check_invariants: bool = True,
    ) -> None:
        self.id: UUID = uuid4() if session_id is None else session_uuid(session_id)
        self.strict_structure = strict_structure
        self.clock = clock
        self.validators: tuple[Validator, ...] = tuple(validators)
        # The invariants a session/invariants marker put in force (with their rules), durable in
        # the log: folded like the rest, so a load re-checks every event written under them.
        self.invariants: tuple[str, ...] = ()
        self._rules: tuple[Rule, ...] = ()
        self.check_invariants = check_invariants  # False: a reader that checks them itself (audit)
        # Events with seq >= _base, in order. Below _base (a session restored from a snapshot) the
        # payloads are fetched on demand into _older, so restoring costs O(surface), not O(log).
        self._base = 0
        self._events: list[SessionEvent] = []
        self._older: dict[int, SessionEvent] = {}
        self._loader: EventLoader | None = None
        self._picker: EventPicker | None = None
        self._chunk = FIRST_CHUNK  # events fetched by the next lazy load (doubling to LOAD_CHUNK)
        self.surface = Surface()
        self.structure = Structure()
        self.last_by_type: dict[str, int] = {}
        self.type_counts: dict[str, int] = {}
        self.first_user_seq: int | None = None
        self.saved_length = 0
        self.epoch = 0  # bumped whenever appended events are forgotten: caches keyed by seq reset
        # Node prices published by meters (name -> (surface generation, prices in surface order,
        # covering the first nodes)); snapshots carry them, a rollback forgets them.
        self.price_columns: dict[str, tuple[int, PackedInts]] = {}
        # Readings published by the layers above (name -> their encoding, made when asked: at a
        # snapshot). Opaque here: each one names the surface it was read from and is checked
        # against the session by its reader. Snapshots carry them, a rollback forgets them.
        self.readings: dict[str, Callable[[], bytes]] = {}
        self._derived: list[Message | None] = []
        self._derived_generation = 0

    # ------------------------------------------------------------ reading

    def __len__(self) -> int:
        return self._base + len(self._events)

    @property
    def next_seq(self) -> int:
        return self._base + len(self._events)

    @property
    def pending(self) -> list[SessionEvent]:
        """Events appended since the last save, in order."""
        return [self.event(s) for s in range(self.saved_length, len(self))]

    def event(self, seq: int) -> SessionEvent:
        offset = seq - self._base
        if 0 <= offset < len(self._events):
            return self._events[offset]
        if not 0 <= seq < len(self):
            raise IndexError(f"session {self.id} has no event at seq {seq} (length {len(self)})")
        found = self._older.get(seq)
        if found is None:
            self._fetch(seq)
            found = self._older.get(seq)
            if found is None:
                raise StoreError(
                    f"session {self.id}: the store returned no event at seq {seq} although the "
                    f"snapshot counts {self._base} stored events (truncated store?)"
                )
        return found

    def events(self, start: int = 0, stop: int | None = None) -> Iterator[SessionEvent]:
        stop = len(self) if stop is None else stop
        for seq in range(start, stop):
            yield self.event(seq)

    def _fetch(self, seq: int) -> None:
        if self._loader is None:
            raise LookupError(f"session {self.id}: event {seq} is not loaded and no loader is set")
        size = self._chunk  # small first (a pressure check wants one or two events), then more
        self._chunk = min(LOAD_CHUNK, 2 * size)
        lo = max(0, seq - size // 2)
        while lo < seq and lo in self._older:
            lo += 1
        hi = min(self._base, lo + size)
        for event in self._loader(lo, hi):
            self._older.setdefault(event.seq, freeze_struct(event))

    def preload(self, seqs: Iterable[int]) -> None:
        """Fetch the stored events of ``seqs`` not loaded yet, in a few store reads that decode only
        them (a compaction about to read its whole span: the events between its nodes, such as
        step markers and tool calls, are not decoded). Without a picker (a session not restored
        with one), nothing: each event is fetched when asked for."""
        if self._picker is None:
            return
        base, older = self._base, self._older
        missing = sorted(seq for seq in seqs if seq < base and seq not in older)
        with collector_paused():  # the fetched events all stay alive
            for at in range(0, len(missing), PICK_CHUNK):
                chunk = missing[at : at + PICK_CHUNK]
                for event in self._picker(chunk[0], chunk[-1] + 1, frozenset(chunk)):
                    older.setdefault(event.seq, freeze_struct(event))

    def last_of(self, event_type: str) -> int | None:
        """Seq of the latest event of ``event_type``, or None."""
        return self.last_by_type.get(event_type)

    def header_seq(self) -> int | None:
        """Seq of the latest ``request/header`` (the envelope of the next model call), or None: the
        one lookup of the header, for :meth:`latest_header` and every reader of the session."""
        return self.last_of(RequestHeader.TYPE)

    def latest_header(self) -> RequestHeader | None:
        """The latest ``request/header`` (the envelope of the next model call), or None."""
        seq = self.header_seq()
        if seq is None:
            return None
        event = self.event(seq)
        return event if isinstance(event, RequestHeader) else None

    @property
    def open_turn(self) -> int | None:
        return self.structure.open_turn

    @property
    def open_step(self) -> int | None:
        return self.structure.open_step

    # ------------------------------------------------------------ appending

    def append(self, event: SessionEvent) -> SessionEvent:
        """Validate and append one event; return it with ``seq`` and ``time`` assigned."""
        stamped = self._stamp(event, len(self))
        self._commit(stamped, self._check(stamped))
        return stamped

    def append_all(self, events: Iterable[SessionEvent]) -> list[SessionEvent]:
        """Append several events atomically: if any is rejected, none is appended.

        Each event is validated against the state left by the ones before it (validators see
        that state too); a rejection rolls the whole batch back in O(batch), or O(surface) when
        the batch holds a replacement.
        """
        batch = list(events)
        if len(batch) <= 1:
            return [self.append(e) for e in batch]
        mark = self._mark(replaces=any(isinstance(e.surface_op, Replace) for e in batch))
        appended: list[SessionEvent] = []
        try:
            for event in batch:
                appended.append(self.append(event))
        except BaseException:
            self._rollback(mark)
            raise
        return appended

    def _mark(self, *, replaces: bool) -> SessionMark:
        return SessionMark(
            length=len(self),
            surface=self.surface.mark(replaces=replaces),
            structure=self.structure.state(),
            last_by_type=dict(self.last_by_type),
            type_counts=dict(self.type_counts),
            first_user_seq=self.first_user_seq,
        )

    def _rollback(self, mark: SessionMark) -> None:
        self.epoch += 1
        self.price_columns = {}
        self.readings = {}
        del self._events[mark.length - self._base :]
        self.surface.rollback(mark.surface)
        self.structure = Structure(mark.structure)
        self.last_by_type = dict(mark.last_by_type)
        self.type_counts = dict(mark.type_counts)
        self.first_user_seq = mark.first_user_seq
        self._restore_invariants()
        if self._derived_generation != self.surface.generation:
            self._derived = []
            self._derived_generation = self.surface.generation
        del self._derived[len(self.surface.nodes) :]

    def _stamp(self, event: SessionEvent, seq: int) -> SessionEvent:
        """The event as logged: seq and time assigned, and deeply immutable (no list or dict of
        the caller's stays reachable from the log)."""
        frozen = FROZEN_CHECKS.get(type(event))
        if frozen is None or not frozen(event):
            event = freeze_struct(event)
        updates: dict[str, object] = {}
        if event.seq == UNSET_SEQ:
            updates["seq"] = seq
        if event.time == UNSET_TIME:
            updates["time"] = self.clock()
        return msgspec.structs.replace(event, **updates) if updates else event

    def _check(self, event: SessionEvent) -> Plan:
        plan = self.surface.plan(event, self.event)
        if event.SURFACE:
            check_message_shape(event)
        if self.strict_structure:
            self.structure.check(event)
        for validator in self.validators:
            validator(self, event)
        for rule in self._rules:
            rule(self, event)
        return plan

    def _commit(self, event: SessionEvent, plan: Plan) -> None:
        self._events.append(event)
        self.surface.apply(plan)
        if self.strict_structure:
            self.structure.apply(event)
        kind = event.TYPE
        self.last_by_type[kind] = event.seq
        self.type_counts[kind] = self.type_counts.get(kind, 0) + 1
        if self.first_user_seq is None and is_user_prompt(event):
            self.first_user_seq = event.seq
        if isinstance(event, SessionInvariants):
            self._put_in_force(event.names)

    def _put_in_force(self, names: Sequence[str]) -> None:
        # The invariants' rules read the turn structure, which only a strict session folds.
        checked = self.check_invariants and self.strict_structure
        self._rules = tuple(invariant_rule(name) for name in names) if checked else ()
        self.invariants = tuple(names)

    def _restore_invariants(self) -> None:
        """The invariants of the latest ``session/invariants`` marker (none without one)."""
        seq = self.last_of(SessionInvariants.TYPE)
        marker = self.event(seq) if seq is not None else None
        names = marker.names if isinstance(marker, SessionInvariants) else ()
        if names != self.invariants:
            self._put_in_force(names)

    def enforce(self, names: Sequence[str]) -> SessionEvent | None:
        """Put the invariants ``names`` in force from the next event on (appends a
        ``session/invariants`` marker naming them with those already in force; None when they all
        are)."""
        wanted = tuple(dict.fromkeys((*self.invariants, *names)))
        if wanted == self.invariants:
            return None
        return self.append(SessionInvariants(names=wanted))

    # Public marks: the compaction transaction stages appends, saves them, and rolls back
    # when the store refuses the save (another writer won).

    def mark(self) -> SessionMark:
        """Capture the fold state so :meth:`rollback` can undo later, unsaved appends."""
        return self._mark(replaces=True)

    def rollback(self, mark: SessionMark) -> None:
        """Forget every event appended after ``mark``; they must not have been saved."""
        if self.saved_length > mark.length:
            raise SessionStateError(
                f"session {self.id}: cannot roll back to length {mark.length}; events up to "
                f"seq {self.saved_length - 1} are already saved"
            )
        self._rollback(mark)

    def adopt(self, other: Session) -> None:
        """Become ``other`` (a fresher load of the same session), keeping this object's identity
        and its validators."""
        if other.id != self.id:
            raise SessionStateError(f"cannot adopt session {other.id} into session {self.id}")
        epoch = max(self.epoch, other.epoch) + 1
        validators = self.validators
        self.__dict__.update(other.__dict__)
        self.epoch = epoch
        self.validators = validators

    def mark_saved(self) -> None:
        self.saved_length = len(self)

    def release(self, loader: EventLoader, picker: EventPicker | None = None) -> None:
        """Keep only the fold state: every event leaves memory and is fetched by ``loader`` (and
        ``picker``, for :meth:`preload`) when asked for again, and the surface's lookup caches are
        dropped, as in a session restored from a snapshot. A fold over a log of any length
        releases each window it appended (:meth:`~compaction.sessions.store.SessionStore.fold`).
        Only a saved session can release its events (:class:`SessionStateError` with pending
        ones)."""
        if self.saved_length != len(self):
            raise SessionStateError(
                f"session {self.id}: cannot release its events with {len(self) - self.saved_length} "
                "of them pending (save them first)"
            )
        self._base = len(self)
        self._events = []
        self._older = {}
        self._loader = loader
        self._picker = picker
        self._chunk = FIRST_CHUNK
        self._derived = []
        self.surface.drop_caches()

    def discard_pending(self) -> None:
        """Drop unsaved events by refolding the saved prefix (used after a failed save)."""
        saved = list(self.events(0, self.saved_length))
        fresh = Session.replay(self.id, saved, strict_structure=self.strict_structure)
        fresh.clock = self.clock
        self.adopt(fresh)

    # ------------------------------------------------------------ the model's view

    @property
    def nodes(self) -> PackedInts:
        """The surface: seqs of the events the model sees, in order."""
        return self.surface.nodes

    def derive_messages(self) -> list[Message]:
        """The surface as provider-neutral messages (one per node that projects to one), cached per
        replace generation."""
        nodes = self.surface.nodes
        if self._derived_generation != self.surface.generation or len(self._derived) > len(nodes):
            self._derived = []
            self._derived_generation = self.surface.generation
        for seq in nodes[len(self._derived) :]:
            self._derived.append(project(self.event(seq)))
        return [m for m in self._derived if m is not None]

    def surface_at(self, seq: int) -> list[int]:
        """The surface exactly as it was right after event ``seq``."""
        if not 0 <= seq < len(self):
            raise IndexError(f"session {self.id} has no event at seq {seq} (length {len(self)})")
        surface = Surface()
        for event in self.events(0, seq + 1):
            surface.fold(event, self.event)
        return list(surface.nodes)

    def messages_at(self, seq: int) -> list[Message]:
        return [m for m in (project(self.event(s)) for s in self.surface_at(seq)) if m is not None]

    # ------------------------------------------------------------ building and snapshots

    @classmethod
    def replay(
        cls,
        session_id: UUID,
        events: Iterable[SessionEvent],
        *,
        strict_structure: bool = True,
    ) -> Session:
        """Fold stored events (already stamped) into a session; every rule is re-checked."""
        session = cls(session_id, strict_structure=strict_structure)
        for event in events:
            session.append(event)
        session.mark_saved()
        return session

    def snapshot(self) -> SessionSnapshot:
        return SessionSnapshot(
            length=len(self),
            nodes=pack_ints(self.surface.nodes, NODE_CODE),
            deltas=pack_ints(self.surface.deltas, DELTA_CODE),
            generation=self.surface.generation,
            structure=self.structure.state(),
            last_by_type=dict(self.last_by_type),
            type_counts=dict(self.type_counts),
            first_user_seq=self.first_user_seq,
            prices=self._packed_prices(),
            readings={name: encode() for name, encode in self.readings.items()},
        )

    def _packed_prices(self) -> dict[str, bytes]:
        """The published price columns that cover the whole surface as it is now."""
        count, generation = len(self.surface.nodes), self.surface.generation
        return {
            name: pack_ints(column, PRICE_CODE)
            for name, (at, column) in self.price_columns.items()
            if at == generation and len(column) == count
        }

    @classmethod
    def from_snapshot(
        cls,
        session_id: UUID,
        snapshot: SessionSnapshot,
        loader: EventLoader,
        *,
        strict_structure: bool = True,
        picker: EventPicker | None = None,
    ) -> Session:
        """The session ``snapshot`` restores, its events fetched by ``loader`` when asked for (and
        by ``picker``, when given, for :meth:`preload`)."""
        session = cls(session_id, strict_structure=strict_structure)
        session._base = snapshot.length
        session._loader = loader
        session._picker = picker
        session.surface = Surface.adopt(
            unpack_ints(snapshot.nodes, NODE_CODE),
            unpack_ints(snapshot.deltas, DELTA_CODE),
            snapshot.generation,
            snapshot.length,
        )
        session.structure = Structure(snapshot.structure)
        session.last_by_type = dict(snapshot.last_by_type)
        session.type_counts = dict(snapshot.type_counts)
        session.first_user_seq = snapshot.first_user_seq
        session.saved_length = snapshot.length
        for name, data in snapshot.prices.items():
            column = unpack_ints(data, PRICE_CODE)
            if len(column) == len(session.surface.nodes):
                session.price_columns[name] = (snapshot.generation, column)
        for name, data in snapshot.readings.items():
            session.readings[name] = functools.partial(bytes, data)
        session._restore_invariants()
        return session


PRICE_CODE = "q"  # node prices: int64, as a meter keeps them (no conversion either way)


def pack_ints(values: Sequence[int], code: str) -> bytes:
    packed = values if isinstance(values, array) and values.typecode == code else array(code, values)
    if sys.byteorder != "little":
        packed = array(code, packed)
        packed.byteswap()
    return packed.tobytes()


def unpack_ints(data: bytes, code: str) -> PackedInts:
    """Little-endian packed ints as an array (one copy of the bytes, no int object per value)."""
    unpacked = packed(code, data)
    if sys.byteorder != "little":
        unpacked.byteswap()
    return unpacked


def is_user_prompt(event: SessionEvent) -> bool:
    """A user message appended to the surface. The first one in a log is the session's task
    statement (``Session.first_user_seq``), which automatic compaction keeps by default."""
    return isinstance(event, UserMessage) and event.surface_op == APPEND


def first_user_seq(events: Iterable[SessionEvent]) -> int | None:
    """:attr:`Session.first_user_seq` for a plain list of events (such as an audit's tolerant log)."""
    return next((e.seq for e in events if is_user_prompt(e)), None)


def latest_header(events: Sequence[SessionEvent]) -> RequestHeader | None:
    """:meth:`Session.latest_header` for a plain list of events (such as an audit's tolerant log)."""
    for event in reversed(events):
        if isinstance(event, RequestHeader):
            return event
    return None


def project(event: SessionEvent) -> Message | None:
    """What one surface node contributes to the model's history (None for nothing)."""
    if not event.SURFACE:
        return None
    message: Message = event.message  # type: ignore[attr-defined]
    if isinstance(event, AssistantMessage) and not message.content:
        return None
    return message
