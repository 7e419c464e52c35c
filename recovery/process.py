"""The recovery process: scan, judge, prove, and (with ``repair``) close stale orphans.

:func:`recover` is one pass over the whole store. :class:`Recovery` keeps its scan position, so
:meth:`Recovery.run_once` can be called again and reads only what was stored since, and
:meth:`Recovery.follow` polls every ``interval_seconds`` until stopped (a stop event, ``polls``, or
Ctrl-C), repairing orphans as their leases expire or their owners die.
"""

from __future__ import annotations

import logging
import math
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

from compaction.errors import EventCompactionError, RecoveryConfigError, RepairConflictError
from compaction.sessions.events import now_utc
from compaction.sessions.store import SessionStore
from recovery.liveness import Liveness, judge
from recovery.repair import Settlement, settle
from recovery.report import OrphanReport, RecoveryReport, UnreadableRecord
from recovery.scan import BATCH, Orphan, OrphanScanner

log = logging.getLogger("recovery")

NAME = "RecoveryConfig"


@dataclass(frozen=True)
class RecoveryConfig:
    """How recovery judges and acts. Validated on construction."""

    repair: bool = False  # close stale, inert orphans (``--repair``); else only report
    check_pids: bool = True  # the owner-gone rule; turn off when hosts share a name
    host: str = field(default_factory=socket.gethostname)  # this host, as leases name it
    interval_seconds: float = 5.0  # --follow poll interval
    batch: int = BATCH  # records per notification-log query
    clock: Callable[[], datetime] = now_utc

    def __post_init__(self) -> None:
        for name in ("repair", "check_pids"):
            if not isinstance(getattr(self, name), bool):
                raise RecoveryConfigError(f"{NAME}.{name} must be a boolean; got {getattr(self, name)!r}")
        interval = self.interval_seconds
        if not isinstance(interval, (int, float)) or not math.isfinite(interval) or interval <= 0:
            raise RecoveryConfigError(
                f"{NAME}.interval_seconds ({interval!r}) must be a positive number of seconds"
            )
        if not isinstance(self.batch, int) or self.batch < 1:
            raise RecoveryConfigError(f"{NAME}.batch ({self.batch!r}) must be an integer >= 1")
        if not self.host:
            raise RecoveryConfigError(f"{NAME}.host must be a non-empty host name")


class Recovery:
    """One recovery process over one store."""

    def __init__(self, store: SessionStore, config: RecoveryConfig | None = None) -> None:
        self.store = store
        self.config = config or RecoveryConfig()
        self.scanner = OrphanScanner(store, batch=self.config.batch)
        self._live: dict[tuple[str, str], OrphanReport] = {}  # proven live orphans (follow)
        self._told: set[str] = set()  # sessions whose unreadable lock record was logged

    def run_once(self) -> RecoveryReport:
        """Scan what was stored since the last pass; judge, prove and settle every open orphan."""
        began = time.perf_counter()
        scan = self.scanner.poll()
        now = self.config.clock()
        orphans = self.scanner.orphans
        open_keys = {(str(o.session_id), o.compaction_id) for o in orphans}
        self._live = {k: v for k, v in self._live.items() if k in open_keys}  # closed meanwhile
        reports = [self._settle(orphan, now) for orphan in orphans]
        unreadable = tuple(UnreadableRecord.of(e) for e in self.scanner.unreadable)
        for record in unreadable:
            if record.session_id not in self._told:
                self._told.add(record.session_id)
                log.error("recovery: %s", record.describe())
        return RecoveryReport(
            tuple(reports),
            scan.events_scanned,
            scan.records_read,
            time.perf_counter() - began,
            unreadable=unreadable,
        )

    def follow(
        self,
        *,
        polls: int | None = None,
        stop: threading.Event | None = None,
        on_report: Callable[[OrphanReport], None] | None = None,
    ) -> RecoveryReport:
        """Poll until ``stop`` is set, ``polls`` passes ran, or Ctrl-C; return the latest report of
        every orphan seen. ``on_report`` gets an orphan's report when it first appears and whenever
        its state or action changes."""
        stop = stop or threading.Event()
        latest: dict[tuple[str, str], OrphanReport] = {}
        unreadable: tuple[UnreadableRecord, ...] = ()
        scanned = read = done = 0
        seconds = 0.0
        try:
            while polls is None or done < polls:
                report = self.run_once()
                done += 1
                scanned, read = scanned + report.events_scanned, read + report.records_read
                seconds += report.seconds
                unreadable = report.unreadable
                for orphan in report.orphans:
                    if on_report is not None and _changed(latest.get(orphan.key), orphan):
                        on_report(orphan)
                    latest[orphan.key] = orphan
                if (polls is not None and done >= polls) or stop.wait(self.config.interval_seconds):
                    break
        except KeyboardInterrupt:
            log.info("recovery: interrupted after %d polls", done)
        return RecoveryReport(
            tuple(latest.values()), scanned, read, seconds, polls=done, unreadable=unreadable
        )

    # ------------------------------------------------------------ one orphan

    def _settle(self, orphan: Orphan, now: datetime) -> OrphanReport:
        liveness = judge(
            orphan.start,
            resume_seq=self.scanner.last_resume(orphan.session_id),
            now=now,
            host=self.config.host,
            check_pids=self.config.check_pids,
        )
        key = (str(orphan.session_id), orphan.compaction_id)
        known = self._live.get(key)
        if known is not None and not liveness.stale:
            return _aged(known, liveness, orphan, now)  # proven inert while live; nothing to do
        try:
            settlement = settle(self.store, orphan, liveness, repair=self.config.repair)
        except RepairConflictError as e:
            log.warning("%s", e)
            settlement = Settlement("conflict", None)
        except EventCompactionError as e:
            # One session that cannot be folded (a corrupt row, a type from a newer version) must
            # not stop the recovery of the others: report it and carry on.
            log.error(
                "recovery: session %s cannot be loaded to prove compaction %s inert: %s",
                orphan.session_id,
                orphan.compaction_id,
                e,
            )
            settlement = Settlement("unreadable", None)
        report = OrphanReport.of(orphan, liveness, settlement, now)
        self._remember(orphan, report)
        _log(report)
        return report

    def _remember(self, orphan: Orphan, report: OrphanReport) -> None:
        if report.action in ("repaired", "already-closed"):
            self.scanner.forget(orphan)
        if report.action == "none" and report.inert:
            self._live[report.key] = report
        else:
            self._live.pop(report.key, None)


def recover(store: SessionStore, config: RecoveryConfig | None = None) -> RecoveryReport:
    """One recovery pass over every session of ``store``."""
    return Recovery(store, config).run_once()


def _aged(known: OrphanReport, liveness: Liveness, orphan: Orphan, now: datetime) -> OrphanReport:
    age = round((now - orphan.start.time).total_seconds(), 3)
    return replace(known, reason=liveness.reason, age_seconds=age)


def _changed(previous: OrphanReport | None, current: OrphanReport) -> bool:
    if previous is None:
        return True
    return (previous.stale, previous.inert, previous.action) != (
        current.stale,
        current.inert,
        current.action,
    )


def _log(report: OrphanReport) -> None:
    if report.corrupt:
        log.error(
            "recovery: CORRUPTION: %s\n%s",
            report.describe(),
            "\n".join(f"  - {line}" for line in report.evidence),
        )
    elif report.action == "repaired":
        log.warning("recovery: %s", report.describe())
    else:
        log.info("recovery: %s", report.describe())
