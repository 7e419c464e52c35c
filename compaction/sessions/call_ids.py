"""Tool call ids are unique on the surface: the ``unique-call-ids`` invariant and its audit.

A provider refuses a request whose messages hold two tool calls with one id (Anthropic rejects two
``tool_use`` blocks with the same id; a result could answer only one of them). So at every position
of a session, the tool-call blocks of the messages on the surface carry distinct ids.

:func:`check_unique_call_ids` is the rule a session puts in force with a ``session/invariants``
marker naming :data:`UNIQUE_CALL_IDS` (:mod:`compaction.sessions.invariants`): it refuses a surface
message appended with a call id already on the surface (or twice in itself). The ids on the
surface are indexed per session and kept up to date as events are appended; a replacement, a
rollback or an adopted session makes the index start over from the surface (reading the payloads
of the surface's messages once). :func:`repeated_call_ids` folds a whole stored log the same way,
markers or not, for the audit.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from compaction.errors import CallIdRuleError, EventRuleError
from compaction.sessions.blocks import Message, ToolCallBlock
from compaction.sessions.events import APPEND, Replace, SessionEvent
from compaction.sessions.invariants import UNIQUE_CALL_IDS
from compaction.sessions.surface import Surface

if TYPE_CHECKING:
    from compaction.sessions.session import Session

__all__ = ["UNIQUE_CALL_IDS", "RepeatedCallId", "call_ids", "check_unique_call_ids", "repeated_call_ids"]


def call_ids(event: SessionEvent) -> tuple[str, ...]:
    """The ids of the tool-call blocks of a surface event's message (none for any other event)."""
    message = getattr(event, "message", None) if event.SURFACE else None
    if not isinstance(message, Message):
        return ()
    return tuple(b.id for b in message.content if isinstance(b, ToolCallBlock))


# ---------------------------------------------------------------- the invariant


@dataclass
class _Index:
    """The call ids on one session's surface, as of ``length`` events, for ``(epoch, generation)``."""

    version: tuple[int, int]
    length: int = 0
    ids: set[str] = field(default_factory=set)


_INDEXES: weakref.WeakKeyDictionary[Session, _Index] = weakref.WeakKeyDictionary()


def check_unique_call_ids(session: Session, event: SessionEvent) -> None:
    """Refuse a surface message appended with a tool call id already on the surface."""
    ids = call_ids(event)
    if not ids or event.surface_op != APPEND:
        return
    on_surface = _surface_ids(session)
    seen: set[str] = set()
    for call_id in ids:
        if call_id in on_surface or call_id in seen:
            where = "twice in the message" if call_id in seen else "already on the surface"
            raise CallIdRuleError(
                UNIQUE_CALL_IDS,
                event.seq,
                f"tool call id {call_id!r} is {where} (seq {event.seq}; expected an id no call on "
                "the surface has: a provider refuses a request that repeats one)",
                call_id=call_id,
            )
        seen.add(call_id)


def _surface_ids(session: Session) -> set[str]:
    version = (session.epoch, session.surface.generation)
    index = _INDEXES.get(session)
    if index is None or index.version != version or index.length > len(session):
        index = _Index(version, len(session))
        for seq in session.nodes:
            index.ids.update(call_ids(session.event(seq)))
        _INDEXES[session] = index
        return index.ids
    for seq in range(index.length, len(session)):  # appended since, in the same generation
        index.ids.update(call_ids(session.event(seq)))
    index.length = len(session)
    return index.ids


# ---------------------------------------------------------------- the audit


@dataclass(frozen=True)
class RepeatedCallId:
    """A surface event that put a call id on the surface while ``holder`` already had it there."""

    seq: int
    call_id: str
    holder: int

    @property
    def message(self) -> str:
        where = "in itself" if self.holder == self.seq else f"while seq {self.holder} is on the surface"
        return f"seq {self.seq} repeats tool call id {self.call_id!r} {where}"


def repeated_call_ids(events: Sequence[SessionEvent]) -> list[RepeatedCallId]:
    """Every surface event of a log (``events[i]`` at seq ``i``) that repeats a call id on the
    surface of its moment, folding the surface as the log does (an event that breaks a surface
    rule is left out, as the audit's replay leaves it)."""
    surface = Surface()
    holders: dict[str, list[int]] = {}
    found: list[RepeatedCallId] = []
    for event in events:
        before = set(surface.nodes) if isinstance(event.surface_op, Replace) else None
        try:
            surface.fold(event, events.__getitem__)
        except EventRuleError:
            surface.length = event.seq + 1
            continue
        if before is not None:
            for seq in before - set(surface.nodes):
                for call_id in call_ids(events[seq]):
                    holders[call_id].remove(seq)
        for call_id, count in Counter(call_ids(event)).items():
            held = holders.setdefault(call_id, [])
            if held or count > 1:
                found.append(RepeatedCallId(event.seq, call_id, held[0] if held else event.seq))
            held.extend([event.seq] * count)
    return found
