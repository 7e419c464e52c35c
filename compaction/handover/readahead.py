"""Reading ahead: what a compaction will need of a session, gathered as its events arrive.

A compaction reads every message of its span (the handover facts, the identifiers the gate counts)
and hashes every shadowed event (``compact/summary.shadowed_hashes``). Done when the compaction
runs, that is a pass over up to the whole surface at the moment the agent waits; done as the
events arrive (the pressure check after each step, once the request is past
:data:`READ_AHEAD_FROM` of the threshold), each event is read once, and the compaction finds the
per-message facts, identifiers and hashes in the session's analysis
(:class:`~compaction.handover.analysis.SpanAnalysis`). It also folds the span's identifiers
(:class:`~compaction.handover.fold.IdentifierFold`) and publishes the fold with the session, whose
snapshots carry it: a process that loads the session finds the span's identifiers already folded.

:class:`ReadAhead` owns the analyses: one per session, held weakly (a session dropped takes its
analysis with it), each bounded by ``max_bytes``.
"""

from __future__ import annotations

from collections.abc import Iterable
from weakref import WeakKeyDictionary

from compaction.handover import facts_fold, fold
from compaction.handover.analysis import ANALYSIS_BYTES, SpanAnalysis
from compaction.handover.carried import DIGESTS, FILES, publish_carried, record
from compaction.handover.facts_fold import FactsFold
from compaction.handover.fold import IdentifierFold, SurfaceFold
from compaction.handover.identifiers import message_kinds
from compaction.sessions.memo import checked_limit
from compaction.sessions.session import Session

__all__ = ["READ_AHEAD_FROM", "ReadAhead"]

READ_AHEAD_FROM = 0.5
"""Share of the compaction threshold from which the pressure check reads ahead."""


class ReadAhead:
    """Every session's analysis (created at the first use, released with the session), and how far
    each session has been read."""

    def __init__(self, max_bytes: int = ANALYSIS_BYTES) -> None:
        self.max_bytes = checked_limit(max_bytes)
        self._analyses: WeakKeyDictionary[Session, SpanAnalysis] = WeakKeyDictionary()
        self._folds: dict[str, WeakKeyDictionary[Session, SurfaceFold]] = {
            fold.READING: WeakKeyDictionary(),
            facts_fold.READING: WeakKeyDictionary(),
        }

    def analysis(self, session: Session) -> SpanAnalysis:
        """The analysis of ``session`` (a new, empty one at the first call)."""
        found = self._analyses.get(session)
        if found is None:
            found = self._analyses[session] = SpanAnalysis(self.max_bytes)
        return found

    def __len__(self) -> int:
        """The sessions whose analysis is held (live sessions only)."""
        return len(self._analyses)

    def observe(self, session: Session) -> int:
        """Read the surface events appended since the last call (the whole surface at the first
        call, or after a rollback); returns how many events were read."""
        analysis = self.analysis(session)
        progress = analysis.progress
        restart = progress.epoch != session.epoch
        seqs: Iterable[int]
        if restart:
            seqs = session.nodes
            progress.waiting = {}
            analysis.memo(DIGESTS).clear()  # kept by seq: seqs of another epoch may name other events
            analysis.memo(FILES).clear()
        else:
            seqs = range(progress.length, len(session))
        count = 0
        waiting = progress.waiting
        with analysis.active():
            for seq in seqs:
                event = session.event(seq)
                if not event.SURFACE:
                    continue
                message = record(analysis, seq, event, waiting)
                if message is not None:
                    message_kinds(message)
                    count += 1
            self._fold(session, restart)
        publish_carried(session, analysis)
        progress.epoch, progress.length = session.epoch, len(session)
        return count

    def _fold(self, session: Session, restart: bool) -> None:
        """Advance the session's folds (its identifiers, its facts) over its new nodes (new folds
        after a rollback or on a new surface) and publish them."""
        for kind, reading in ((IdentifierFold, fold.READING), (FactsFold, facts_fold.READING)):
            folds = self._folds[reading]
            found = None if restart else folds.get(session)
            if found is None or not found.holds(session):
                found = kind.start(session)
                if found is None:
                    folds.pop(session, None)
                    session.readings.pop(reading, None)
                    continue
                folds[session] = found
            found.advance(session)
            session.readings[reading] = found.encode
