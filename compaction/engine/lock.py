"""The log-recorded compaction lock, with leases (docs/architecture.md, "The lock, leases and brackets").

The lock is live when the latest of ``compact/start`` / ``compact/end`` is a start and no later
``session/resume`` exists. Across processes the lock holds through optimistic concurrency: the start is
an append at a definite seq, so of two racing workers only one can store it.

A compaction that fails after its start was stored closes its own bracket (``compact/end{error}``,
retried until the store answers). When even that cannot be stored, the owner keeps two records of
the failure, so the lock it still holds in the log does not lock out the living:

* :class:`UnreleasedLeases`, held by the engine: its next compaction of that session, in the same
  process, takes the lease over at once (it stores the failed bracket's ``compact/end`` with its new
  ``compact/start``, in one save);
* a failure report on this host (:func:`report_failure`, a small file under
  :func:`failure_reports_dir`): ``compaction recover`` on this host judges such a lease stale
  (``owner-failed``) instead of live, and ``--repair`` closes it.

A compaction id comes from the log, and an imported log may hold any string, so an id becomes a
file name only through :func:`failure_report_path`: a UUID (what this library writes) names
``<id>.json``; any other id names ``id-<sha256 of the id>.json``. Either way the file is directly
in the folder: nothing outside it is ever read, written or deleted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from uuid import UUID

from compaction.engine.brackets import open_start
from compaction.sessions.events import now_utc
from compaction.sessions.leases import LeaseClaim
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


def closed_in_log(session: Session, claim: LeaseClaim) -> bool:
    """Does ``session``'s log show the claim's compaction closed? Its start is stored at the
    claim's seq and is no longer the live lock (ended, or a later ``session/resume``). A claim
    whose start this session does not hold yet (not stored, or stored after the session was
    loaded) is not known closed."""
    seq = claim.start_seq
    if seq is None or seq >= len(session):
        return False
    event = session.event(seq)
    if not isinstance(event, CompactStart) or event.compaction_id != claim.compaction_id:
        return True  # the seq holds something else: the claim's start is not the lock
    lock = inspect_lock(session)
    return not (lock.live and lock.start_seq == seq)


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
    return Lease(host=socket.gethostname(), pid=os.getpid(), expires_at=now + timedelta(seconds=seconds))


def own_lease(lock: LockState) -> bool:
    """The live lock's lease names this process (this host, this pid)."""
    if lock.start is None:
        return False
    lease = lock.start.lease
    return lease.host == socket.gethostname() and lease.pid == os.getpid()


@dataclass
class UnreleasedLeases:
    """The compactions an engine started whose ``compact/end`` could not be stored: session id ->
    compaction id. Only these may be taken over (a live compaction of the same process, another
    task's, is never in it)."""

    by_session: dict[UUID, str] = field(default_factory=dict)

    def remember(self, session_id: UUID, compaction_id: str) -> None:
        self.by_session[session_id] = compaction_id

    def forget(self, session_id: UUID) -> None:
        self.by_session.pop(session_id, None)

    def takes_over(self, session: Session, lock: LockState) -> CompactStart | None:
        """The start of ``lock`` when it is this process's own failed compaction: the caller may
        close it and start anew at once; None when the lock belongs to anyone else."""
        start = lock.start
        if start is None or not lock.live or not own_lease(lock):
            return None
        if self.by_session.get(session.id) != start.compaction_id:
            return None
        return start


# ---------------------------------------------------------------- failure reports on this host

FAILURE_DIR_VARIABLE = "COMPACTION_FAILURE_DIR"


def failure_reports_dir() -> Path:
    """Where owners report the failed compactions they could not close: ``$COMPACTION_FAILURE_DIR``,
    else ``compaction-failures`` under the system's temporary folder (one per host, as leases are)."""
    configured = os.environ.get(FAILURE_DIR_VARIABLE)
    return Path(configured) if configured else Path(tempfile.gettempdir()) / "compaction-failures"


def is_uuid_shaped(compaction_id: str) -> bool:
    """Whether ``compaction_id`` is a UUID in its canonical text form (lower-case, hyphenated)."""
    try:
        return str(UUID(compaction_id)) == compaction_id
    except ValueError:
        return False


def failure_report_path(compaction_id: str) -> Path:
    """The failure report of ``compaction_id``: always a file directly in :func:`failure_reports_dir`
    (the id's own name when it is a UUID, else a name derived by hashing it)."""
    if is_uuid_shaped(compaction_id):
        name = compaction_id
    else:
        name = "id-" + hashlib.sha256(compaction_id.encode("utf-8", "surrogatepass")).hexdigest()
    return failure_reports_dir() / f"{name}.json"


def unsafe_id_warning(compaction_id: str) -> str | None:
    """A sentence for people when ``compaction_id`` is not what this library writes (a UUID): such
    an id came from an edited or foreign log and never names a path of its own."""
    if is_uuid_shaped(compaction_id):
        return None
    return (
        f"compaction id {compaction_id!r} is not a UUID (this library writes UUIDs): it came from "
        f"an edited or imported log; its failure report, if any, is only looked up as "
        f"{failure_report_path(compaction_id).name} in {failure_reports_dir()}"
    )


def report_failure(start: CompactStart, session_id: UUID, reason: str) -> Path | None:
    """Record on this host that ``start``'s compaction failed and its end could not be stored;
    the report's path, or None when the folder cannot be written (the failure is logged anyway)."""
    folder = failure_reports_dir()
    path = failure_report_path(start.compaction_id)
    lease = start.lease
    document = {
        "compaction_id": start.compaction_id,
        "session_id": str(session_id),
        "start_seq": start.seq,
        "host": lease.host,
        "pid": lease.pid,
        "reason": reason,
    }
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document), encoding="utf-8")
    except OSError:
        return None
    return path


def reported_failure(start: CompactStart) -> str | None:
    """The reason the owner of ``start`` reported for its failure on this host, if it did."""
    path = failure_report_path(start.compaction_id)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(document, dict) or document.get("compaction_id") != start.compaction_id:
        return None
    if document.get("pid") != start.lease.pid or document.get("host") != start.lease.host:
        return None
    return str(document.get("reason") or "failed")


def clear_failure(compaction_id: str) -> None:
    """Forget the failure report of a compaction whose bracket is now closed."""
    with contextlib.suppress(OSError):
        failure_report_path(compaction_id).unlink()
