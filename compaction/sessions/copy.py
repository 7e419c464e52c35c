"""Store-to-store copy, verified and resumable.

Each session is copied in batches of stored events (each batch one atomic insert at the same seqs), so
an interrupted copy leaves a contiguous prefix in the target and a second run copies only what is
missing. After copying, the target session is folded again and verified by event count and surface
hash. A target that already holds *different* events at the same seqs is reported, never
overwritten.

Every read is window by window (:meth:`~compaction.sessions.store.SessionStore.iter_events` and
:meth:`~compaction.sessions.store.SessionStore.fold`): memory holds a window of events and the
sessions' fold state, whatever their length. The copy takes the events the source holds when it
starts (a writer appending meanwhile is not copied: the next run resumes with it). The source is
folded first, every rule re-checked, so a session that breaks one fails before anything of it is
written.
Either store may be partitioned (:mod:`compaction.sessions.partitioned`): each session is read from
and written to the partition its id routes to, so a copy also re-partitions.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from uuid import UUID

from compaction.errors import ConcurrencyError, StoreError
from compaction.sessions.events import SessionEvent
from compaction.sessions.hashing import folded_surface_hash
from compaction.sessions.mapper import encode_event
from compaction.sessions.partitioned import AnyStore, home_store
from compaction.sessions.store import SessionStore

BATCH = 1000

Progress = Callable[[UUID, int, int], None]
"""Called with (session id, events copied so far, events in the session)."""


@dataclass(frozen=True)
class CopyReport:
    session_id: UUID
    events: int
    copied: int  # events written by this run (0 when already complete)
    surface_hash: str
    verified: bool
    status: str  # copied | resumed | already-copied | conflict
    detail: str = ""

    def as_json(self) -> dict[str, object]:
        return {
            "session_id": str(self.session_id),
            "events": self.events,
            "copied": self.copied,
            "surface_hash": self.surface_hash,
            "verified": self.verified,
            "status": self.status,
            "detail": self.detail,
        }


def copy_sessions(
    source: AnyStore,
    target: AnyStore,
    session_ids: Iterable[UUID],
    *,
    progress: Progress | None = None,
    batch: int = BATCH,
) -> list[CopyReport]:
    return [copy_session(source, target, sid, progress=progress, batch=batch) for sid in session_ids]


def copy_session(
    source: AnyStore,
    target: AnyStore,
    session_id: UUID,
    *,
    progress: Progress | None = None,
    batch: int = BATCH,
) -> CopyReport:
    origin = home_store(source, session_id)
    length = origin.stream_length(session_id)
    if not length:
        raise StoreError(f"session {session_id} has no events in the source store")
    # The hash of exactly the events copied (the first ``length``): a writer appending to the
    # source meanwhile must not make a faithful copy look unverified. The fold re-checks every
    # rule, so a source that breaks one fails here, before anything is written.
    expected = folded_surface_hash(origin, session_id, hi=length, use_snapshots=False)[1]
    home = home_store(target, session_id)
    present = home.stream_length(session_id)
    if present > length or (present and not _same_event(origin, home, session_id, present - 1)):
        return CopyReport(
            session_id,
            length,
            0,
            expected,
            False,
            "conflict",
            f"the target holds different events at seqs < {present}; nothing written",
        )
    copied = 0
    for chunk in _batches(origin.iter_events(session_id, present, length), batch):
        lo = present + copied
        try:
            home.append_events(session_id, chunk)
        except ConcurrencyError as e:
            raise StoreError(
                f"session {session_id}: the target gained events at seqs {lo}..{lo + len(chunk) - 1} "
                "while copying (another writer?); run the copy again"
            ) from e
        copied += len(chunk)
        if progress is not None:
            progress(session_id, present + copied, length)
    if present + copied != length:
        raise StoreError(
            f"session {session_id}: the source returned {present + copied} of its first {length} "
            "events while copying; run the copy again"
        )
    status = "already-copied" if copied == 0 else ("resumed" if present else "copied")
    copied_session, actual = folded_surface_hash(home, session_id, use_snapshots=False)
    verified = len(copied_session) == length and actual == expected
    if verified and copied and len(copied_session) >= home.snapshot_interval > 0:
        home.take_session_snapshot(copied_session)  # loads in the target stay cheap
    detail = "" if verified else f"target has {len(copied_session)} events, surface hash {actual[:12]}"
    return CopyReport(session_id, length, copied, expected, verified, status, detail)


def _same_event(source: SessionStore, target: SessionStore, session_id: UUID, seq: int) -> bool:
    mine, theirs = (s.load_events(session_id, seq, seq + 1) for s in (source, target))
    return len(mine) == len(theirs) == 1 and encode_event(mine[0]) == encode_event(theirs[0])


def _batches(events: Iterable[SessionEvent], size: int) -> Iterator[list[SessionEvent]]:
    """``events`` in lists of ``size`` (the last one shorter): one atomic insert each."""
    iterator = iter(events)
    while chunk := list(itertools.islice(iterator, max(1, size))):
        yield chunk
