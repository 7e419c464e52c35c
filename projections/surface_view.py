"""The surface view: per session, the ordered surface and the replace generation.

Folded with the aggregate's own :class:`~compaction.sessions.surface.Surface` (every rule re-checked), and
materialized as one row per surface event:

``surface_nodes(session_id, seq, slot, delta, shadowed_by)``
    ``slot`` orders the surface: an appended node takes its own seq, a replacement takes the slot of
    the first node it shadows, so live nodes (``shadowed_by IS NULL``) ordered by slot ARE the
    surface. A replacement marks what it shadows with its own seq instead of deleting anything, so
    the surface as it was right after any seq is in the view too (:func:`surface_at`).
    ``delta`` is the node's tool-pairing delta (+calls of an assistant message, -1 per tool result).
``surface_sessions(session_id, events, nodes, generation)``
    events folded, live nodes, replacements so far.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

from compaction.sessions.events import SessionEvent
from compaction.sessions.surface import EventLookup, Surface
from projections.base import SessionProjection, plan_or_advance
from projections.tables import table
from projections.views.base import ViewRecorder

NODES = table(
    "surface_nodes",
    ("session_id", "seq"),
    session_id="text",
    seq="int",
    slot="int",
    delta="int",
    shadowed_by="int",
)
SESSIONS = table(
    "surface_sessions",
    ("session_id",),
    session_id="text",
    events="int",
    nodes="int",
    generation="int",
)


@dataclass
class SurfaceState:
    key: str
    surface: Surface
    lookup: EventLookup
    slots: dict[int, int] = field(default_factory=dict)  # live seq -> slot


class SurfaceProjection(SessionProjection[SurfaceState]):
    name = "surface"
    tables = (NODES, SESSIONS)

    def new_state(self, key: str) -> SurfaceState:
        return SurfaceState(key, Surface(), self.lookup(key))

    def load_state(self, key: str) -> SurfaceState | None:
        found = self.view.select(SESSIONS.name, ("events", "generation"), {"session_id": key})
        if not found:
            return None
        events, generation = found[0]
        live = self.view.select(
            NODES.name,
            ("seq", "slot", "delta"),
            {"session_id": key, "shadowed_by": None},
            order_by=("slot",),
        )
        surface = Surface.restore([r[0] for r in live], [r[2] for r in live], generation, events)
        return SurfaceState(key, surface, self.lookup(key), {r[0]: r[1] for r in live})

    def fold(self, state: SurfaceState, event: SessionEvent) -> None:
        surface = state.surface
        plan = plan_or_advance(surface, event, state.lookup)
        if plan is None:
            return
        if plan.on_surface:
            key, seq, slots = state.key, plan.seq, state.slots
            rows = self.changes.bucket(NODES.name)
            slot = seq
            if plan.is_replace:
                slot = slots[plan.shadowed[0]]
                deltas = surface.deltas[plan.start_index : plan.end_index + 1]
                for shadowed, delta in zip(plan.shadowed, deltas, strict=True):
                    rows[key, shadowed] = (key, shadowed, slots.pop(shadowed), delta, seq)
            slots[seq] = slot
            rows[key, seq] = (key, seq, slot, plan.delta, None)
        surface.apply(plan)

    def flush(self, state: SurfaceState) -> None:
        surface = state.surface
        row = (state.key, surface.length, len(surface.nodes), surface.generation)
        self.changes.upsert(SESSIONS.name, (state.key,), row)


# ---------------------------------------------------------------- reading the view


@dataclass(frozen=True)
class SurfaceRecord:
    """One session's surface as the view holds it."""

    session_id: UUID
    nodes: tuple[int, ...]
    generation: int
    events: int


def surface_of(view: ViewRecorder, session_id: UUID) -> SurfaceRecord | None:
    """The current surface of ``session_id`` (None when the view has not seen the session)."""
    key = str(session_id)
    found = view.select(SESSIONS.name, ("events", "generation"), {"session_id": key})
    if not found:
        return None
    live = view.select(NODES.name, ("seq",), {"session_id": key, "shadowed_by": None}, order_by=("slot",))
    events, generation = found[0]
    return SurfaceRecord(session_id, tuple(r[0] for r in live), generation, events)


def surface_at(view: ViewRecorder, session_id: UUID, seq: int) -> list[int]:
    """The surface exactly as it was right after event ``seq`` (what the model saw then)."""
    rows = view.select(
        NODES.name,
        ("seq", "shadowed_by"),
        {"session_id": str(session_id)},
        order_by=("slot", "seq"),
    )
    return [s for s, by in rows if s <= seq and (by is None or by > seq)]


def surfaces(view: ViewRecorder) -> list[SurfaceRecord]:
    """Every session's surface, in session id order."""
    sessions = view.select(SESSIONS.name, ("session_id", "events", "generation"))
    live = view.select(
        NODES.name, ("session_id", "seq"), {"shadowed_by": None}, order_by=("session_id", "slot")
    )
    nodes: dict[str, list[int]] = {}
    for key, seq in live:
        nodes.setdefault(key, []).append(seq)
    return [
        SurfaceRecord(UUID(key), tuple(nodes.get(key, ())), generation, events)
        for key, events, generation in sessions
    ]
