"""The surface hash: one stable fingerprint of what the model sees.

``surface_hash(session)`` is the lowercase hex sha256 of, in order::

    b"surface-hash/v1\\n"
    msgspec.json.encode(surface_seqs)                          # e.g. b"[0,3,4,17]"
    b"\\n"
    msgspec.json.encode(derived_messages, order="deterministic")

``surface_seqs`` is the surface (``Session.nodes``), ``derived_messages`` is
``Session.derive_messages()`` (spec §b.7: one message per node that projects to one, in surface
order). ``order="deterministic"`` sorts dictionary keys (tool arguments, metadata) so the hash does
not depend on insertion order; Struct fields keep their declared order.

Two sessions with the same hash show the model the same history at the same positions. Recovery
uses it in the inertness proof, export and copy record it so a copy can be verified anywhere.
The hash is stable across stores, processes and versions as long as the message Structs evolve by
msgspec's rules (new fields get defaults and are omitted when default). A change to this recipe
must bump the ``v1`` tag (:data:`SURFACE_HASH_VERSION`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

import msgspec

from sessions.blocks import Message
from sessions.session import Session

SURFACE_HASH_VERSION = 1
_PREFIX = f"surface-hash/v{SURFACE_HASH_VERSION}\n".encode()
_ENCODER = msgspec.json.Encoder(order="deterministic")


def hash_surface(seqs: Sequence[int], messages: Iterable[Message]) -> str:
    """The surface hash of an explicit surface (seqs) and its derived messages."""
    digest = hashlib.sha256(_PREFIX)
    digest.update(_ENCODER.encode(list(seqs)))
    digest.update(b"\n")
    digest.update(_ENCODER.encode(list(messages)))
    return digest.hexdigest()


def surface_hash(session: Session) -> str:
    """The surface hash of ``session`` as it stands (pending events included)."""
    return hash_surface(session.nodes, session.derive_messages())
