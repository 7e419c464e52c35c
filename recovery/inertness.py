"""The inertness proof: an orphan's events did not change what the model sees.

For an orphaned ``compact/start`` of compaction ``C`` at seq ``S``, the orphan's events are the
start itself, any ``compact/summary`` of ``C``, and any surface event that cites ``S`` in
``source_event_seqs`` or carries the checkpoint of ``C`` (``message.source.compaction_id == C``).
The proof folds the session's surface twice from the log (every surface rule checked on every event):

* **with** every event, as stored;
* **without** the orphan's events (their seqs are left unused, every other event keeps its seq).

The orphan is **inert** when both folds give the same surface seqs, the same derived messages and
the same :func:`~compaction.sessions.hashing.hash_surface`, and no surface event cites the start or carries
its checkpoint. With the atomic commit (docs/architecture.md, difference 1) an orphan is only ever a lone
start, so anything else is a corruption, reported with the evidence collected here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from compaction.errors import EventCompactionError
from compaction.sessions.blocks import Message
from compaction.sessions.events import SessionEvent
from compaction.sessions.hashing import hash_surface
from compaction.sessions.session import Session, project
from compaction.sessions.surface import Surface
from compaction.vocabulary.events import CompactStart, CompactSummary

_ENCODER = msgspec.json.Encoder(order="deterministic")


@dataclass(frozen=True)
class Fold:
    """One surface fold: its seqs, derived messages and hash, or the error that stopped it."""

    seqs: tuple[int, ...]
    messages: tuple[Message, ...]
    hash: str | None
    error: str | None = None


@dataclass(frozen=True)
class InertnessProof:
    compaction_id: str
    start_seq: int
    inert: bool
    surface_hash: str | None  # the surface as stored (the fold with every event)
    orphan_seqs: tuple[int, ...]  # the start, its summaries and any surface event citing it
    citing_seqs: tuple[int, ...]  # surface events that cite the start or carry its checkpoint
    with_orphan: Fold
    without_orphan: Fold
    evidence: tuple[str, ...]


def prove_inert(session: Session, start: CompactStart) -> InertnessProof:
    """Fold ``session``'s log with and without the orphan's events and compare."""
    events = list(session.events())
    summaries, citing = _orphan_events(events, start)
    orphan_seqs = tuple(sorted({start.seq, *summaries, *citing}))
    with_orphan = fold(events, skip=frozenset())
    without = fold(events, skip=frozenset(orphan_seqs))
    evidence = _evidence(
        events, start, summaries=summaries, citing=citing, with_orphan=with_orphan, without=without
    )
    inert = not citing and _same(with_orphan, without)
    return InertnessProof(
        compaction_id=start.compaction_id,
        start_seq=start.seq,
        inert=inert,
        surface_hash=with_orphan.hash,
        orphan_seqs=orphan_seqs,
        citing_seqs=citing,
        with_orphan=with_orphan,
        without_orphan=without,
        evidence=evidence,
    )


def fold(events: Sequence[SessionEvent], *, skip: frozenset[int]) -> Fold:
    """A from-scratch surface fold of ``events``, leaving the seqs in ``skip`` unused."""
    by_seq = {e.seq: e for e in events}
    surface = Surface()
    try:
        for event in events:
            if event.seq in skip:
                surface.length = event.seq + 1  # the seq stays taken, nothing else happens
                continue
            surface.fold(event, by_seq.__getitem__)
        surface.cuts()  # tool-pairing balance must hold over the folded surface
    except EventCompactionError as e:
        return Fold((), (), None, f"{type(e).__name__}: {e}")
    seqs = tuple(surface.nodes)
    messages = tuple(m for m in (project(by_seq[s]) for s in seqs) if m is not None)
    return Fold(seqs, messages, hash_surface(seqs, messages))


def _orphan_events(
    events: Sequence[SessionEvent], start: CompactStart
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    summaries: list[int] = []
    citing: list[int] = []
    for event in events[start.seq + 1 :]:
        if isinstance(event, CompactSummary) and event.compaction_id == start.compaction_id:
            summaries.append(event.seq)
        elif event.SURFACE and _cites(event, start):
            citing.append(event.seq)
    return tuple(summaries), tuple(citing)


def _cites(event: SessionEvent, start: CompactStart) -> bool:
    if event.source_event_seqs and start.seq in event.source_event_seqs:
        return True
    message: Message = event.message  # type: ignore[attr-defined]
    return message.source.compaction_id == start.compaction_id


def _same(a: Fold, b: Fold) -> bool:
    return (
        a.error is None
        and b.error is None
        and a.seqs == b.seqs
        and _ENCODER.encode(list(a.messages)) == _ENCODER.encode(list(b.messages))
        and a.hash == b.hash
    )


def _evidence(
    events: Sequence[SessionEvent],
    start: CompactStart,
    *,
    summaries: tuple[int, ...],
    citing: tuple[int, ...],
    with_orphan: Fold,
    without: Fold,
) -> tuple[str, ...]:
    where = f"compaction {start.compaction_id} (compact/start seq {start.seq})"
    lines: list[str] = []
    for seq in summaries:
        lines.append(f"{where}: compact/summary at seq {seq} was stored without its compact/end")
    for seq in citing:
        event = events[seq]
        op = event.surface_op
        lines.append(
            f"{where}: {event.TYPE} at seq {seq} cites the start or carries its checkpoint "
            f"(surface_op {op!r}, source_event_seqs {list(event.source_event_seqs or ())})"
        )
    for name, result in (("with", with_orphan), ("without", without)):
        if result.error is not None:
            lines.append(f"{where}: the surface fold {name} the orphan's events failed: {result.error}")
    if with_orphan.error is None and without.error is None and with_orphan.seqs != without.seqs:
        lines.append(
            f"{where}: surface with the orphan's events {_seqs(with_orphan.seqs)} (hash "
            f"{with_orphan.hash}) differs from the surface without them {_seqs(without.seqs)} "
            f"(hash {without.hash})"
        )
    return tuple(lines)


def _seqs(seqs: tuple[int, ...], limit: int = 12) -> str:
    shown = ", ".join(str(s) for s in seqs[:limit])
    more = f", ... ({len(seqs)} nodes)" if len(seqs) > limit else ""
    return f"[{shown}{more}]"
