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
from collections.abc import Iterable, Sequence

import msgspec

from compaction.sessions.blocks import Message
from compaction.sessions.events import SessionEvent
from compaction.sessions.mapper import encode_event
from compaction.sessions.session import Session

__all__ = ["SURFACE_HASH_VERSION", "event_hash", "hash_surface", "surface_hash"]

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


def event_hash(event: SessionEvent) -> str:
    """sha256 of the event's stored encoding (what the store holds for that seq). Computed on each
    call: a compaction asks its session's analysis, which hashes each event once
    (:meth:`compaction.handover.analysis.SpanAnalysis.event_hash`)."""
    return hashlib.sha256(encode_event(event)).hexdigest()
