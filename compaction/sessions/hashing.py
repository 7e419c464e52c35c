"""Content hashes, one home for the whole library: the surface hash and the event hash.

The surface hash is one stable fingerprint of what the model sees. The recipe is defined once, here, as
:func:`surface_hash` (export and copy record it; recovery reports it; audit can compare it). It is the
lowercase hex sha256 of::

    msgspec.json.encode(surface_seqs)              # e.g. b"[0,3,4,17]"
    msgspec.json.encode(message)                   # for each derived message, in surface order

with nothing between the parts (each is a self-delimiting JSON value). ``surface_seqs`` is the
surface (``Session.nodes``); the messages are what ``Session.derive_messages()`` returns (one
message per node that projects to one). Messages hold only Structs (field order fixed by
their declarations) and strings, so the encoding is deterministic.

Two sessions with the same hash show the model the same history at the same positions. The hash is
stable across stores, processes and versions as long as the message Structs evolve by msgspec's
rules (new fields get defaults and are omitted when default). :func:`hash_surface` applies the same
recipe to an explicit surface, such as the inertness proof's from-scratch folds; a test pins the two
functions together. :data:`SURFACE_HASH_VERSION` names this recipe; a change must bump it.

:func:`event_hash` is the sha256 of one event's stored encoding: ``compact/summary`` records it for
every shadowed event, and the audit re-computes it to show the log was not changed since.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from typing import Protocol
from uuid import UUID

import msgspec

from compaction.errors import StoreError
from compaction.sessions.blocks import Message
from compaction.sessions.events import SessionEvent
from compaction.sessions.mapper import encode_event
from compaction.sessions.session import Session, project

__all__ = [
    "SURFACE_HASH_VERSION",
    "event_hash",
    "folded_surface_hash",
    "hash_surface",
    "surface_hash",
    "surface_hash_in_windows",
]

SURFACE_HASH_VERSION = 1
_ENCODER = msgspec.json.Encoder()


def hash_surface(seqs: Sequence[int], messages: Iterable[Message]) -> str:
    """The surface hash of an explicit surface (its seqs) and its derived messages."""
    digest = hashlib.sha256(_ENCODER.encode(list(seqs)))
    for message in messages:
        digest.update(_ENCODER.encode(message))
    return digest.hexdigest()


def surface_hash(session: Session) -> str:
    """The surface hash of ``session``: its surface seqs and the messages derived from them."""
    return hash_surface(session.nodes, session.derive_messages())


SURFACE_WINDOW = 4096
"""Surface nodes :func:`surface_hash_in_windows` fetches together at most."""

EventPicker = Callable[[int, int, Container[int]], Iterable[SessionEvent]]
"""The stored events with ``lo <= seq < hi`` whose seq is in the container, in seq order."""


def surface_hash_in_windows(session: Session, pick: EventPicker, window: int = SURFACE_WINDOW) -> str:
    """:func:`surface_hash` of a session whose events stay in the store (one a fold released,
    :meth:`~compaction.sessions.store.SessionStore.fold`): the surface's events are fetched with
    ``pick`` a window of nodes at a time, in surface order, and each message is hashed and
    dropped (the seqs too are hashed a window at a time), so memory holds one window of them and
    the surface's packed seqs, never every message."""
    nodes = session.nodes
    digest = hashlib.sha256(b"[")
    for start in range(0, len(nodes), window):  # the bytes of encode(list(nodes)), in pieces
        digest.update(b"," if start else b"")
        digest.update(_ENCODER.encode(list(nodes[start : start + window]))[1:-1])
    digest.update(b"]")
    for piece in _pieces(nodes, window):
        wanted = frozenset(piece)
        found = {event.seq: event for event in pick(min(piece), max(piece) + 1, wanted)}
        for seq in piece:
            event = found.get(seq)
            if event is None:
                raise StoreError(f"session {session.id}: the store returned no event at seq {seq}")
            message = project(event)
            if message is not None:
                digest.update(_ENCODER.encode(message))
    return digest.hexdigest()


class FoldedLog(Protocol):
    """A store a session is folded from and its events fetched in windows
    (:class:`~compaction.sessions.store.SessionStore`, or a partitioned one)."""

    def fold(self, session_id: UUID, *, hi: int | None = None, use_snapshots: bool = True) -> Session: ...

    def iter_events(
        self, session_id: UUID, lo: int = 0, hi: int | None = None, *, only: Container[int] | None = None
    ) -> Iterator[SessionEvent]: ...


def folded_surface_hash(
    source: FoldedLog, session_id: UUID, *, hi: int | None = None, use_snapshots: bool = True
) -> tuple[Session, str]:
    """The stored session folded (its first ``hi`` events when given: ``source.fold``, every rule
    re-checked, its events released) and its :func:`surface_hash`, computed window by window
    (:func:`surface_hash_in_windows`, the surface's events fetched again from ``source``)."""
    session = source.fold(session_id, hi=hi, use_snapshots=use_snapshots)

    def pick(lo: int, hi: int, only: Container[int]) -> Iterator[SessionEvent]:
        return source.iter_events(session_id, lo, hi, only=only)

    return session, surface_hash_in_windows(session, pick)


def _pieces(nodes: Sequence[int], window: int) -> Iterator[list[int]]:
    """Consecutive nodes, in surface order, ``window`` at most, whose seqs lie within ``4 * window``
    of each other (a summary's seq is far after the nodes around it: a piece that spanned the
    shadowed events in between would read their rows)."""
    piece: list[int] = []
    lo = hi = 0
    for seq in nodes:
        if piece and (len(piece) == window or max(hi, seq) - min(lo, seq) >= 4 * window):
            yield piece
            piece = []
        lo, hi = (seq, seq) if not piece else (min(lo, seq), max(hi, seq))
        piece.append(seq)
    if piece:
        yield piece


def event_hash(event: SessionEvent) -> str:
    """sha256 of the event's stored encoding (what the store holds for that seq). Computed on each
    call: a compaction asks its session's analysis, which hashes each event once
    (:meth:`compaction.handover.analysis.SpanAnalysis.event_hash`)."""
    return hashlib.sha256(encode_event(event)).hexdigest()
