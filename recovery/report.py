"""What recovery reports: an :class:`OrphanReport` per orphan, in a :class:`RecoveryReport`.

``action`` is one of:

* ``none``: the orphan is live (a compaction is in progress); nothing was done;
* ``would-repair``: stale and inert; run with ``repair`` (``--repair``) to close it;
* ``repaired``: stale and inert; ``compact/end{error: "abandoned: ..."}`` (and, when the orphan
  owned the still-open turn, the interrupted-turn closers) were appended in one atomic save;
* ``already-closed``: its ``compact/end`` landed between the scan and the repair (by its owner or
  another recovery process); nothing was written;
* ``refused-corrupt``: not inert; left in place and reported with the evidence;
* ``conflict``: other writers kept appending to the session; nothing was written (the next run or
  poll retries);
* ``unreadable``: the session could not be loaded (a corrupt row, an event type this version does not
  know); nothing was proven or written, the error is logged, and the other sessions are recovered.
  A session whose lock record itself does not decode is listed in :attr:`RecoveryReport.unreadable`
  (an :class:`UnreadableRecord`, action ``unreadable``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from compaction.engine.lock import unsafe_id_warning
from compaction.errors import OrphanCorruptionError, UnreadableRowError
from recovery.liveness import Liveness
from recovery.repair import Action, Settlement
from recovery.scan import Orphan


@dataclass(frozen=True)
class OrphanReport:
    session_id: str
    compaction_id: str
    start_seq: int
    turn: int | None
    stale: bool
    rule: str  # resume | lease-expired | owner-failed | owner-gone | live
    reason: str
    inert: bool | None  # None: not proven (already closed, or a conflict)
    surface_hash: str | None
    action: Action
    age_seconds: float
    owner_host: str
    owner_pid: int
    lease_expires_at: str
    end_seq: int | None = None
    closer_seqs: tuple[int, ...] = ()
    evidence: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()  # e.g. a compaction id that is not a UUID

    @classmethod
    def of(cls, orphan: Orphan, liveness: Liveness, settlement: Settlement, now: datetime) -> OrphanReport:
        proof = settlement.proof
        lease = orphan.lease
        return cls(
            session_id=str(orphan.session_id),
            compaction_id=orphan.compaction_id,
            start_seq=orphan.start_seq,
            turn=orphan.start.turn,
            stale=liveness.stale,
            rule=liveness.rule,
            reason=liveness.reason,
            inert=None if proof is None else proof.inert,
            surface_hash=None if proof is None else proof.surface_hash,
            action=settlement.action,
            age_seconds=round((now - orphan.start.time).total_seconds(), 3),
            owner_host=lease.host,
            owner_pid=lease.pid,
            lease_expires_at=lease.expires_at.isoformat(),
            end_seq=settlement.end_seq,
            closer_seqs=settlement.closer_seqs,
            evidence=() if proof is None else proof.evidence,
            warnings=tuple(w for w in (unsafe_id_warning(orphan.compaction_id),) if w),
        )

    @property
    def key(self) -> tuple[str, str]:
        return (self.session_id, self.compaction_id)

    @property
    def corrupt(self) -> bool:
        return self.inert is False

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "compaction_id": self.compaction_id,
            "start_seq": self.start_seq,
            "turn": self.turn,
            "stale": self.stale,
            "rule": self.rule,
            "reason": self.reason,
            "inert": self.inert,
            "surface_hash": self.surface_hash,
            "action": self.action,
            "age_seconds": self.age_seconds,
            "owner": {
                "host": self.owner_host,
                "pid": self.owner_pid,
                "lease_expires_at": self.lease_expires_at,
            },
            "end_seq": self.end_seq,
            "closer_seqs": list(self.closer_seqs),
            "evidence": list(self.evidence),
            "warnings": list(self.warnings),
        }

    def describe(self) -> str:
        state = "stale" if self.stale else "live"
        inert = {True: "inert", False: "NOT INERT", None: "unproven"}[self.inert]
        return (
            f"session {self.session_id} compaction {self.compaction_id} (compact/start seq "
            f"{self.start_seq}, {self.age_seconds:.1f}s old): {state} ({self.reason}), {inert}, "
            f"action {self.action}" + "".join(f"; warning: {w}" for w in self.warnings)
        )


@dataclass(frozen=True)
class UnreadableRecord:
    """A session whose lock record (``compact/start``, ``compact/end`` or ``session/resume``)
    does not decode: it cannot be judged, so nothing is proven or written there (``action``
    ``unreadable``); the scan and the repair of every other session go on."""

    session_id: str
    seq: int
    notification_id: int
    event_type: str
    reason: str

    @classmethod
    def of(cls, error: UnreadableRowError) -> UnreadableRecord:
        return cls(str(error.session_id), error.seq, error.notification_id, error.event_type, error.reason)

    def describe(self) -> str:
        return (
            f"session {self.session_id}: its {self.event_type} record at seq {self.seq} does not "
            f"decode ({self.reason}); nothing proven or written there; run `compaction audit "
            f"{self.session_id}`"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "seq": self.seq,
            "notification_id": self.notification_id,
            "type": self.event_type,
            "reason": self.reason,
            "action": "unreadable",
        }


@dataclass(frozen=True)
class RecoveryReport:
    orphans: tuple[OrphanReport, ...]
    events_scanned: int  # log positions covered by the scan (every event of every session)
    records_read: int  # compact/start, compact/end and session/resume records decoded
    seconds: float
    polls: int = 1
    unreadable: tuple[UnreadableRecord, ...] = ()  # sessions whose lock records do not decode

    @property
    def corrupt(self) -> tuple[OrphanReport, ...]:
        return tuple(o for o in self.orphans if o.corrupt)

    @property
    def repaired(self) -> tuple[OrphanReport, ...]:
        return tuple(o for o in self.orphans if o.action == "repaired")

    @property
    def passed(self) -> bool:
        """No orphan is corrupt, every orphan's session could be read, and every lock record
        decoded."""
        return (
            not self.corrupt
            and not self.unreadable
            and not any(o.action == "unreadable" for o in self.orphans)
        )

    def raise_for_corruption(self) -> None:
        """Raise :class:`OrphanCorruptionError` with every corrupt orphan's evidence."""
        corrupt = self.corrupt
        if corrupt:
            raise OrphanCorruptionError(
                f"recovery: {len(corrupt)} orphaned compact/start record(s) are not inert "
                "(a compaction commit was not atomic); they were left in place",
                [line for o in corrupt for line in (o.describe(), *o.evidence)],
            )

    def to_json(self) -> dict[str, Any]:
        return {
            "orphans": [o.to_json() for o in self.orphans],
            "unreadable": [u.to_json() for u in self.unreadable],
            "events_scanned": self.events_scanned,
            "records_read": self.records_read,
            "seconds": round(self.seconds, 6),
            "polls": self.polls,
            "repaired": len(self.repaired),
            "corrupt": len(self.corrupt),
            "passed": self.passed,
        }
