"""A tolerant replay of a stored log: folds the surface event by event, and where an event breaks a
rule it records the violation instead of stopping, so an audit can report a tampered or corrupt log
with the seq that breaks it. At every replacement it captures the surface of that moment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from compaction.errors import CorruptSurfaceError, EventRuleError
from compaction.sessions.events import Replace, SessionEvent
from compaction.sessions.surface import Surface


@dataclass(frozen=True)
class Moment:
    """The surface right before a replacement event was applied."""

    seq: int
    nodes: tuple[int, ...]
    balance: tuple[int, ...] | None  # running tool-pairing balance at each cut, None if corrupt
    corrupt: str | None = None


@dataclass
class Replay:
    events: Sequence[SessionEvent]
    surface: Surface = field(default_factory=Surface)
    moments: dict[int, Moment] = field(default_factory=dict)
    violations: dict[int, str] = field(default_factory=dict)

    def event(self, seq: int) -> SessionEvent:
        return self.events[seq]


def replay(events: Sequence[SessionEvent]) -> Replay:
    result = Replay(events)
    surface = result.surface
    for event in events:
        if isinstance(event.surface_op, Replace):
            result.moments[event.seq] = _moment(event.seq, surface)
        try:
            surface.fold(event, result.event)
        except EventRuleError as e:
            result.violations[event.seq] = str(e)
            surface.length = event.seq + 1  # skip it, keep folding what follows
    return result


def _moment(seq: int, surface: Surface) -> Moment:
    try:
        cuts = tuple(surface.cuts())
    except CorruptSurfaceError as e:
        return Moment(seq, tuple(surface.nodes), None, str(e))
    return Moment(seq, tuple(surface.nodes), cuts)


def surface_after(events: Sequence[SessionEvent], seq: int) -> list[int]:
    """The surface right after ``seq``, tolerant of rule-breaking events (they are skipped)."""
    return list(replay(events[: seq + 1]).surface.nodes)
