"""Reading ahead: what a compaction will need of a session, gathered as its events arrive.

A compaction reads every message of its span (the handover facts, the identifiers the gate counts)
and hashes every shadowed event (``compact/summary.shadowed_hashes``). Done when the compaction
runs, that is a pass over up to the whole surface at the moment the agent waits; done as the
events arrive (the pressure check after each step, once the request is past
:data:`READ_AHEAD_FROM` of the threshold), each event is read once, and the compaction finds the
per-message facts, identifiers and hashes in the caches that hold them (by message and event
identity; :func:`compaction.facts.read`, :func:`compaction.identifiers.message_kinds`,
:func:`compaction.sessions.hashing.event_hash`).
"""

from __future__ import annotations

from collections.abc import Iterable
from weakref import WeakKeyDictionary

from compaction.facts import Call, Result, file_action, read
from compaction.identifiers import message_kinds
from compaction.sessions.blocks import ToolCallBlock
from compaction.sessions.hashing import event_hash
from compaction.sessions.session import Session, project

__all__ = ["READ_AHEAD_FROM", "ReadAhead"]

READ_AHEAD_FROM = 0.5
"""Share of the compaction threshold from which the pressure check reads ahead."""


class ReadAhead:
    """Per session: the events read so far (the log length at the last call, per epoch) and the
    tool calls still waiting for their result (a call and its result are read as a pair, for the
    files it touched)."""

    def __init__(self) -> None:
        self._read: WeakKeyDictionary[Session, tuple[int, int]] = WeakKeyDictionary()
        self._calls: WeakKeyDictionary[Session, dict[str, ToolCallBlock]] = WeakKeyDictionary()

    def observe(self, session: Session) -> int:
        """Read the surface events appended since the last call (the whole surface at the first
        call, or after a rollback); returns how many events were read."""
        done = self._read.get(session)
        seqs: Iterable[int]
        if done is None or done[0] != session.epoch:
            seqs = session.nodes
            calls = self._calls[session] = {}
        else:
            seqs = range(done[1], len(session))
            calls = self._calls.setdefault(session, {})
        count = 0
        for seq in seqs:
            event = session.event(seq)
            message = project(event)
            if message is not None:
                _pair(read(message).items, calls)
                message_kinds(message)
                event_hash(event)
                count += 1
        self._read[session] = (session.epoch, len(session))
        return count


def _pair(items: Iterable[object], calls: dict[str, ToolCallBlock]) -> None:
    for item in items:
        if isinstance(item, Call):
            calls[item.block.id] = item.block
        elif isinstance(item, Result):
            call = calls.pop(item.block.tool_call_id, None)
            if call is not None:
                file_action(call, item.block)
