"""Other harnesses' compactions as compaction brackets, so the audit checks them like ours.

A Claude Code ``compact_boundary`` + ``isCompactSummary`` message, or a pi ``compaction`` entry,
becomes ``compact/start``, ``compact/summary`` (``provider`` = the harness), a ``user/message``
replacement of everything before the retained tail (the harness's own summary text, verbatim, as the
checkpoint), and ``compact/end``. Nothing is repaired: where the harness's cut split a tool pair or
dropped the first user message, the import still succeeds and the audit reports it.

The importers (:mod:`compaction.importers`, a room above the engine) call
:func:`import_foreign_compaction` with a :class:`ForeignCompaction` when they meet one.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from compaction.engine.meters import HeuristicMeter
from compaction.handover.fidelity import measure_fidelity
from compaction.handover.identifiers import extract
from compaction.sessions.blocks import Message, TextBlock, text_of
from compaction.sessions.events import Replace, UserMessage
from compaction.sessions.hashing import event_hash
from compaction.sessions.session import Session, project
from compaction.vocabulary.checkpoint import foreign_checkpoint
from compaction.vocabulary.events import (
    CompactEnd,
    CompactStart,
    CompactSummary,
    Lease,
    ShadowedRange,
)


@dataclass(frozen=True)
class ForeignCompaction:
    """A compaction another harness made (Claude Code ``compact_boundary`` + ``isCompactSummary``,
    pi ``compaction``, Codex ``compacted``): its summary message, who made it, and where its
    retained tail begins."""

    summary: Message
    provider: str  # the harness that made it (its format name)
    model: str | None
    first_kept_seq: int | None  # None: everything on the surface before the boundary is replaced
    origin: str
    detail: str = ""


def shadowed_positions(session: Session, first_kept_seq: int | None) -> tuple[int, ...]:
    """The surface nodes before the retained tail (everything when ``first_kept_seq`` is None)."""
    nodes = session.nodes
    if first_kept_seq is None:
        return tuple(nodes)
    last = len(nodes) - 1
    while last >= 0 and nodes[last] >= first_kept_seq:
        last -= 1
    return tuple(nodes[: last + 1])


def import_foreign_compaction(session: Session, foreign: ForeignCompaction) -> None:
    shadowed = shadowed_positions(session, foreign.first_kept_seq)
    if not shadowed:
        session.append(UserMessage(message=foreign.summary, surface_op="append", origin=foreign.origin))
        return
    meter = HeuristicMeter()
    compaction_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{session.id}:{foreign.origin}"))
    checkpoint = foreign_checkpoint(compaction_id, foreign.summary)
    text = text_of(foreign.summary.content)
    identifiers = extract(m for m in (project(session.event(s)) for s in shadowed) if m)
    base = len(session)
    time = session.clock()
    session.append_all(
        [
            CompactStart(
                compaction_id=compaction_id,
                turn=None,
                lease=Lease(host=foreign.provider, pid=0, expires_at=time),
                origin=foreign.origin,
            ),
            CompactSummary(
                compaction_id=compaction_id,
                summary=(TextBlock(text),),
                shadowed_range=ShadowedRange(shadowed[0], shadowed[-1]),
                shadowed_seqs=shadowed,
                shadowed_token_count=sum(meter.event(session.event(s)) for s in shadowed),
                provider=foreign.provider,
                model=foreign.model or "unknown",
                fidelity=measure_fidelity(text, identifiers, 0.0),
                shadowed_hashes={str(s): event_hash(session.event(s)) for s in shadowed},
                meter=meter.name,
                summary_token_count=meter.message(checkpoint),
                origin=foreign.origin,
            ),
            UserMessage(
                message=checkpoint,
                surface_op=Replace(shadowed[0], shadowed[-1]),
                source_event_seqs=(base, base + 1, *shadowed),
                origin=foreign.origin,
            ),
            CompactEnd(compaction_id=compaction_id, turn=None, origin=foreign.origin),
        ]
    )
