"""Live or stale: decided from the lease a ``compact/start`` records, never by guessing.

An unmatched start is **stale** when, checked in this order:

1. ``resume``: a later ``session/resume`` exists (a new process lifecycle took the session over);
2. ``lease-expired``: its lease's ``expires_at`` is in the past;
3. ``owner-failed``: the lease names this host, and its owner reported on this host that the
   compaction failed and its ``compact/end`` could not be stored
   (:func:`compaction.engine.lock.report_failure`; the owner is alive, its compaction is not);
4. ``owner-gone``: the lease names this host and no process with that pid exists (a zombie counts
   as gone). Skipped when pid checks are off (hosts that share a name across pid namespaces).

Otherwise it is **live** (``rule == "live"``): a compaction is in progress and holds the lock.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

from compaction.engine.lock import reported_failure
from compaction.vocabulary.events import CompactStart

Rule = Literal["resume", "lease-expired", "owner-failed", "owner-gone", "live"]


@dataclass(frozen=True)
class Liveness:
    stale: bool
    rule: Rule
    reason: str


def judge(
    start: CompactStart,
    *,
    resume_seq: int | None,
    now: datetime,
    host: str,
    check_pids: bool = True,
) -> Liveness:
    """Live or stale for the unmatched ``start``; ``resume_seq`` is the session's latest resume."""
    lease = start.lease
    if resume_seq is not None and resume_seq > start.seq:
        return Liveness(True, "resume", f"a later session/resume (seq {resume_seq}) started a new lifecycle")
    if lease.expires_at <= now:
        ago = (now - lease.expires_at).total_seconds()
        return Liveness(
            True,
            "lease-expired",
            f"lease of {lease.host} pid {lease.pid} expired at {lease.expires_at.isoformat()} "
            f"({ago:.1f}s ago)",
        )
    failure = reported_failure(start) if lease.host == host else None
    if failure is not None:
        return Liveness(
            True,
            "owner-failed",
            f"its owner ({lease.host} pid {lease.pid}) reported that it failed and could not store "
            f"its compact/end: {failure}",
        )
    if check_pids and lease.host == host and not process_alive(lease.pid):
        return Liveness(True, "owner-gone", f"owner process {lease.pid} on {host} is gone")
    left = (lease.expires_at - now).total_seconds()
    return Liveness(
        False,
        "live",
        f"held by {lease.host} pid {lease.pid} until {lease.expires_at.isoformat()} ({left:.1f}s left)",
    )


def process_alive(pid: int) -> bool:
    """Whether a process with ``pid`` exists on this host (zombies count as gone)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, owned by someone else
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    """Linux only: a killed child nobody has reaped yet still answers ``kill(pid, 0)``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # the state follows the parenthesised command name, which may itself contain ") "
    return stat.rsplit(")", 1)[-1].split()[:1] == ["Z"]
