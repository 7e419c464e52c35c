"""The log-recorded compaction lock, with leases (docs/architecture.md, "The lock, leases and brackets").

The lock is live when the latest of ``compact/start`` / ``compact/end`` is a start and no later
``session/resume`` exists. Across processes the lock holds through optimistic concurrency: the start is
an append at a definite seq, so of two racing workers only one can store it.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta

from compaction.engine.brackets import open_start
from compaction.sessions.events import now_utc
from compaction.sessions.session import Session
from compaction.vocabulary.events import CompactStart, Lease


@dataclass(frozen=True)
class LockState:
    start_seq: int | None  # the unmatched compact/start, if any
    live: bool
    start: CompactStart | None = None


def inspect_lock(session: Session) -> LockState:
    start = open_start(session)
    if start is None:
        return LockState(None, False)
    resume = session.last_of("session/resume")
    event = session.event(start)
    assert isinstance(event, CompactStart)
    live = resume is None or resume < start
    return LockState(start, live, event)


def busy_message(stage: str, session: Session, lock: LockState) -> str:
    holder = ""
    if lock.start is not None:
        lease = lock.start.lease
        holder = (
            f" (compact/start seq {lock.start_seq}, compaction {lock.start.compaction_id}, held by "
            f"{lease.host} pid {lease.pid} until {lease.expires_at.isoformat()}; if that process is "
            "gone, run `compaction recover --repair`)"
        )
    return (
        f"{stage}: compaction already in progress; the session compaction lock is already active "
        f"in session {session.id}{holder}"
    )


def new_lease(seconds: float, now: datetime | None = None) -> Lease:
    now = now or now_utc()
    return Lease(
        host=socket.gethostname(), pid=os.getpid(), expires_at=now + timedelta(seconds=seconds)
    )
