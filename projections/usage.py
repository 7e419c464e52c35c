"""Token usage: surface tokens per session now, and at the end of every step.

``usage_sessions(session_id, events, nodes, surface_tokens, generation, meter)`` and
``usage_steps(session_id, seq, turn, step, surface_tokens, nodes)`` (one row per ``step/end``,
``seq`` being the step/end's). Tokens are the surface's price under the projection's meter
(:class:`~compaction.engine.meters.HeuristicMeter` unless another is given; its name is recorded on every
session row, and resuming a view with a different meter is refused). Each node is priced once when
it joins the surface; a replacement subtracts what it shadows, so the running total is O(new
events).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from compaction.engine.meters import HeuristicMeter, Meter
from compaction.errors import ProjectionConfigError
from compaction.sessions.events import SessionEvent, StepEnd
from compaction.sessions.store import SessionStore
from compaction.sessions.surface import EventLookup, Surface
from projections.base import DEFAULT_MAX_CACHED_SESSIONS, SessionProjection, plan_or_advance
from projections.tables import table
from projections.views.base import ViewRecorder

SESSIONS = table(
    "usage_sessions",
    ("session_id",),
    session_id="text",
    events="int",
    nodes="int",
    surface_tokens="int",
    generation="int",
    meter="text",
)
STEPS = table(
    "usage_steps",
    ("session_id", "seq"),
    session_id="text",
    seq="int",
    turn="int",
    step="int",
    surface_tokens="int",
    nodes="int",
)


@dataclass
class UsageState:
    key: str
    surface: Surface
    lookup: EventLookup
    prices: dict[int, int]
    tokens: int = 0


class UsageProjection(SessionProjection[UsageState]):
    name = "usage"
    tables = (SESSIONS, STEPS)

    def __init__(
        self,
        view: ViewRecorder,
        store: SessionStore,
        *,
        meter: Meter | None = None,
        max_cached_sessions: int = DEFAULT_MAX_CACHED_SESSIONS,
    ) -> None:
        super().__init__(view, store, max_cached_sessions=max_cached_sessions)
        self.meter = meter or HeuristicMeter()

    def new_state(self, key: str) -> UsageState:
        return UsageState(key, Surface(), self.lookup(key), {})

    def load_state(self, key: str) -> UsageState | None:
        """Resume from the store's aggregate at the last folded seq, priced again (O(surface))."""
        found = self.view.select(SESSIONS.name, ("events", "meter"), {"session_id": key})
        if not found:
            return None
        events, meter = found[0]
        if meter != self.meter.name:
            raise ProjectionConfigError(
                f"projection 'usage': the view was built with meter {meter!r} but this runner "
                f"prices with {self.meter.name!r} (session {key}); rebuild the usage "
                f"view, or run with meter {meter!r}"
            )
        session = self.store.get(UUID(key), at=events - 1, strict_structure=False)
        prices = {seq: self.meter.event(session.event(seq)) for seq in session.nodes}
        tokens = sum(prices.values())
        return UsageState(key, session.surface.copy(), self.lookup(key), prices, tokens)

    def fold(self, state: UsageState, event: SessionEvent) -> None:
        surface = state.surface
        plan = plan_or_advance(surface, event, state.lookup)
        if plan is not None:
            if plan.on_surface:
                prices = state.prices
                if plan.is_replace:
                    state.tokens -= sum(prices.pop(s) for s in plan.shadowed)
                price = prices[plan.seq] = self.meter.event(event)
                state.tokens += price
            surface.apply(plan)
        if isinstance(event, StepEnd):
            row = (state.key, event.seq, event.turn, event.step, state.tokens, len(surface.nodes))
            self.changes.upsert(STEPS.name, (state.key, event.seq), row)

    def flush(self, state: UsageState) -> None:
        surface = state.surface
        row = (
            state.key,
            surface.length,
            len(surface.nodes),
            state.tokens,
            surface.generation,
            self.meter.name,
        )
        self.changes.upsert(SESSIONS.name, (state.key,), row)


# ---------------------------------------------------------------- reading the view


def usage_of(view: ViewRecorder, session_id: UUID) -> dict[str, Any] | None:
    """``{events, nodes, surface_tokens, generation, meter}`` of one session, or None."""
    columns = ("events", "nodes", "surface_tokens", "generation", "meter")
    found = view.select(SESSIONS.name, columns, {"session_id": str(session_id)})
    return dict(zip(columns, found[0], strict=True)) if found else None


def steps_of(view: ViewRecorder, session_id: UUID) -> list[dict[str, Any]]:
    """One dict per ``step/end``: ``{seq, turn, step, surface_tokens, nodes}``, in log order."""
    columns = ("seq", "turn", "step", "surface_tokens", "nodes")
    rows = view.select(STEPS.name, columns, {"session_id": str(session_id)}, order_by=("seq",))
    return [dict(zip(columns, row, strict=True)) for row in rows]
