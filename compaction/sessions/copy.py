"""Store-to-store copy, verified and resumable.

Each session is copied in batches of stored events (each batch one atomic insert at the same seqs), so
an interrupted copy leaves a contiguous prefix in the target and a second run copies only what is
missing. After copying, the target session is loaded and verified by event count and surface hash. A
target that already holds *different* events at the same seqs is reported, never overwritten.
Either store may be partitioned (:mod:`compaction.sessions.partitioned`): each session is read from
and written to the partition its id routes to, so a copy also re-partitions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from uuid import UUID

from compaction.errors import ConcurrencyError, StoreError
from compaction.sessions.hashing import surface_hash
from compaction.sessions.mapper import encode_event
from compaction.sessions.partitioned import AnyStore, home_store
from compaction.sessions.session import Session

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
    events = source.load_events(session_id)
    if not events:
        raise StoreError(f"session {session_id} has no events in the source store")
    # The hash of exactly the events copied: a writer appending to the source meanwhile must
    # not make a faithful copy look unverified.
    expected = surface_hash(Session.replay(session_id, events))
    home = home_store(target, session_id)
    present = home.stream_length(session_id)
    last_target = home.load_events(session_id, present - 1, present) if present else []
    if present > len(events) or (
        last_target and encode_event(last_target[0]) != encode_event(events[present - 1])
    ):
        return CopyReport(
            session_id,
            len(events),
            0,
            expected,
            False,
            "conflict",
            f"the target holds different events at seqs < {present}; nothing written",
        )
    copied = 0
    for lo in range(present, len(events), batch):
        chunk = events[lo : lo + batch]
        try:
            home.append_events(session_id, chunk)
        except ConcurrencyError as e:
            raise StoreError(
                f"session {session_id}: the target gained events at seqs {lo}..{lo + len(chunk) - 1} "
                "while copying (another writer?); run the copy again"
            ) from e
        copied += len(chunk)
        if progress is not None:
            progress(session_id, present + copied, len(events))
    status = "already-copied" if copied == 0 else ("resumed" if present else "copied")
    copied_session = home.get(session_id, use_snapshots=False)
    actual = surface_hash(copied_session)
    verified = len(copied_session) == len(events) and actual == expected
    if verified and copied and len(copied_session) >= home.snapshot_interval > 0:
        home.take_session_snapshot(copied_session)  # loads in the target stay cheap
    detail = "" if verified else f"target has {len(copied_session)} events, surface hash {actual[:12]}"
    return CopyReport(session_id, len(events), copied, expected, verified, status, detail)
