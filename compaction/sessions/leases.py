"""Compaction leases that a store keeps outside the log, and the store that keeps none.

The compaction lock is recorded in the log: an unmatched ``compact/start`` names its lease (host,
pid, expiry), and on SQLite and PostgreSQL the append of that start at a definite seq is what
arbitrates between processes (optimistic concurrency: of two racing starts only one is stored).
Those stores keep no other lease (:class:`LogLeases`).

A store may also keep each session's lease in a place of its own that processes claim by
compare-and-set before they store a start (JetStream's ``<stream>_leases`` bucket,
:mod:`compaction.sessions.nats.leases`): :meth:`CompactionLeases.acquire` claims it (or refuses
with :class:`~compaction.errors.LeaseTakenError`), :meth:`~CompactionLeases.confirm` records the
seq the start was stored at, :meth:`~CompactionLeases.release` gives it back once the compaction's
``compact/end`` is stored. The log's ``compact/start`` and ``compact/end`` stay exactly as they are
(the audit and recovery read them); the claim only decides who may append a start.

A claim held by someone else may be taken over when it has expired, when it is this process's own
failed compaction (the engine takes its own lock over at once), or when the log already closed its
compaction (the caller says so: ``closed``, which sees the session's events).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol
from uuid import UUID


@dataclass(frozen=True)
class LeaseClaim:
    """A compaction's claim on its session: who, until when, and (once stored) its start's seq."""

    session_id: UUID
    compaction_id: str
    host: str
    pid: int
    expires_at: datetime
    start_seq: int | None = None


@dataclass(frozen=True)
class Grant:
    """A claim the store granted, and the revision to compare-and-set it by."""

    claim: LeaseClaim
    revision: int


Closed = Callable[[LeaseClaim], bool]
"""Does the log show the claim's compaction closed (its start stored and since ended)?"""


class CompactionLeases(Protocol):
    def acquire(self, claim: LeaseClaim, *, replaces: str | None, closed: Closed) -> Grant | None:
        """Claim the session's lease for ``claim``; None when the store keeps no lease. Raises
        :class:`~compaction.errors.LeaseTakenError` while another compaction holds it (its
        expiry not reached, not ``replaces``, not ``closed``)."""
        ...

    def confirm(self, grant: Grant, start_seq: int) -> Grant:
        """Record that the claim's ``compact/start`` is stored at ``start_seq``."""
        ...

    def release(self, grant: Grant) -> None:
        """Give the lease back (the compaction's ``compact/end`` is stored)."""
        ...


class LogLeases:
    """The lease of SQLite, PostgreSQL and memory stores: the log's ``compact/start`` alone."""

    def acquire(self, claim: LeaseClaim, *, replaces: str | None, closed: Closed) -> Grant | None:
        return None

    def confirm(self, grant: Grant, start_seq: int) -> Grant:
        return grant

    def release(self, grant: Grant) -> None:
        return None
