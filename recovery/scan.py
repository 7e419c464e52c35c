"""The orphan scan: every ``compact/start`` with no ``compact/end`` of the same compaction id.

The scan is one pass over the store's notification log (every session at once), asking the store
only for the three record types it needs (``compact/start``, ``compact/end``, ``session/resume``):
the database filters by topic, and only those few payloads are decoded. :class:`OrphanScanner` is
an incremental fold: each :meth:`~OrphanScanner.poll` reads what was recorded since the last one, so
the recovery process (``--follow``) costs O(new records) per poll.

``events_scanned`` counts the events a pass covered (all events of all sessions, whatever
their type); ``records_read`` counts the records it decoded.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from uuid import UUID

from compaction.engine.brackets import BracketFold
from compaction.errors import UnreadableRowError
from compaction.sessions.events import SessionEvent, SessionResume
from compaction.sessions.store import SessionStore
from compaction.vocabulary.events import CompactEnd, CompactStart, Lease

SCAN_TOPICS = (CompactStart.TYPE, CompactEnd.TYPE, SessionResume.TYPE)
BATCH = 5000


@dataclass(frozen=True)
class Orphan:
    """An unmatched ``compact/start`` of one session."""

    session_id: UUID
    start: CompactStart

    @property
    def compaction_id(self) -> str:
        return self.start.compaction_id

    @property
    def start_seq(self) -> int:
        return self.start.seq

    @property
    def lease(self) -> Lease:
        return self.start.lease

    @property
    def key(self) -> tuple[UUID, str]:
        return (self.session_id, self.compaction_id)


@dataclass(frozen=True)
class ScanPass:
    """What one poll covered."""

    events_scanned: int
    records_read: int
    position: int  # the last notification id covered


class OrphanScanner:
    """Folds the notification log into the open brackets and the latest resume of each session."""

    def __init__(self, store: SessionStore, *, batch: int = BATCH) -> None:
        self.store = store
        self.batch = batch
        self.position = 0
        self.events_scanned = 0
        self.records_read = 0
        self._brackets: dict[UUID, BracketFold] = {}  # open brackets only: closed ones are forgotten
        self._resumes: dict[UUID, int] = {}
        self._unreadable: dict[UUID, UnreadableRowError] = {}

    @property
    def unreadable(self) -> list[UnreadableRowError]:
        """The first lock record of each session that did not decode, ordered by session: those
        sessions cannot be judged; the scan goes on with the others."""
        return [self._unreadable[sid] for sid in sorted(self._unreadable, key=str)]

    def _skip(self, error: UnreadableRowError) -> None:
        session_id = error.session_id
        if isinstance(session_id, UUID):
            self._unreadable.setdefault(session_id, error)

    @property
    def orphans(self) -> list[Orphan]:
        """Open brackets, ordered by session and seq."""
        found = [Orphan(sid, b.start) for sid, fold in self._brackets.items() for b in fold.open]
        return sorted(found, key=lambda o: (str(o.session_id), o.start_seq))

    def last_resume(self, session_id: UUID) -> int | None:
        return self._resumes.get(session_id)

    def forget(self, orphan: Orphan) -> None:
        """Drop an orphan this process closed (its ``compact/end`` arrives with the next poll)."""
        fold = self._brackets.get(orphan.session_id)
        if fold is not None:
            fold.forget(orphan.compaction_id)
            if not fold.brackets:
                del self._brackets[orphan.session_id]

    def poll(self) -> ScanPass:
        """Read every record stored since the last poll and fold it."""
        top = self.store.max_notification_id()
        covered = self.store.count_notifications(self.position, top)
        read = 0
        for session_id, event in self._records(self.position, top):
            self._fold(session_id, event)
            read += 1
        self.position = max(self.position, top)
        self.events_scanned += covered
        self.records_read += read
        return ScanPass(covered, read, self.position)

    def _records(self, after: int, stop: int) -> Iterator[tuple[UUID, SessionEvent]]:
        skipped: list[int] = []  # notification ids of lock records that did not decode

        def skip(error: UnreadableRowError) -> None:
            skipped.append(error.notification_id)
            self._skip(error)

        while after < stop:
            skipped.clear()
            batch = self.store.notifications(
                after, self.batch, topics=SCAN_TOPICS, upto=stop, on_unreadable=skip
            )
            for notification in batch:
                yield notification.session_id, notification.event
            last = max([after, *skipped, *(n.notification_id for n in batch[-1:])])
            if last == after:
                return
            after = last

    def _fold(self, session_id: UUID, event: SessionEvent) -> None:
        if isinstance(event, (CompactStart, CompactEnd)):
            fold = self._brackets.setdefault(session_id, BracketFold())
            bracket = fold.fold(event)
            if bracket is not None and bracket.end is not None:
                fold.forget(bracket.compaction_id)
            if not fold.brackets:
                del self._brackets[session_id]
        elif isinstance(event, SessionResume):
            self._resumes[session_id] = max(event.seq, self._resumes.get(session_id, -1))
