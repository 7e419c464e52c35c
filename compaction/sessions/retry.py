"""A save retried once over a transient store failure, never storing its events twice.

A save that fails in the database (:class:`~compaction.errors.SaveError`: a dropped connection, a
restart, a failover) is worth one more try once the store answers again: the store's connection
pool replaces a broken connection when it is next asked for one. But a save whose answer was lost
may have committed, so the retry first asks the store whether the session's pending events are
already stored at their seqs (:meth:`SessionStore.pending_stored`): if they are, the session is
marked saved and nothing is written again; if not, the same events are saved again (same seqs: a
concurrent writer still makes it fail with :class:`~compaction.errors.ConcurrencyError`, never a
double). A conflict is not retried: another writer got there first, and the caller decides.

:func:`save_retrying` waits with ``time.sleep`` (synchronous callers); :func:`asave_retrying`
awaits ``asyncio.sleep`` (the agent loop, async framework adapters).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from compaction.errors import ConcurrencyError, SaveError

if TYPE_CHECKING:
    from compaction.sessions.session import Session
    from compaction.sessions.store import SessionStore

log = logging.getLogger("compaction.store")

RETRY_DELAY = 1.0
"""Seconds to wait before the retry: long enough for a pool to drop a broken connection and for a
failover to answer, short against an agent step."""


def save_retrying(
    store: SessionStore, session: Session, *, retries: int = 1, delay: float = RETRY_DELAY
) -> int:
    """``store.save(session)``, retried ``retries`` times after ``delay`` seconds on a
    :class:`SaveError`; returns how many events were saved (by this call or by a failed attempt
    whose commit went through). The last failure is raised."""
    for attempt in range(retries + 1):
        try:
            return _save(store, session, attempt)
        except SaveError as error:
            if attempt == retries:
                raise
            _retrying(session, error, delay)
            time.sleep(delay)
            landed = _landed(store, session)
            if landed is not None:
                return landed
    raise AssertionError("unreachable")


async def asave_retrying(
    store: SessionStore, session: Session, *, retries: int = 1, delay: float = RETRY_DELAY
) -> int:
    """:func:`save_retrying` for coroutines: the wait is an ``asyncio.sleep``."""
    for attempt in range(retries + 1):
        try:
            return _save(store, session, attempt)
        except SaveError as error:
            if attempt == retries:
                raise
            _retrying(session, error, delay)
            await asyncio.sleep(delay)
            landed = _landed(store, session)
            if landed is not None:
                return landed
    raise AssertionError("unreachable")


def _save(store: SessionStore, session: Session, attempt: int) -> int:
    """One attempt; a retry that conflicts with the earlier attempt's own events (its commit went
    through after all) is that attempt's success, not a conflict."""
    try:
        return store.save(session)
    except ConcurrencyError:
        if attempt == 0:
            raise
        landed = _landed(store, session)
        if landed is None:
            raise
        return landed


def _retrying(session: Session, error: SaveError, delay: float) -> None:
    log.warning("session %s: a save failed (%s); retrying in %.1f s", session.id, error, delay)


def _landed(store: SessionStore, session: Session) -> int | None:
    """When the failed save's events turn out stored, mark them saved and say how many."""
    pending = len(session.pending)
    if pending and store.pending_stored(session) is True:
        session.mark_saved()
        log.warning(
            "session %s: the failed save's %d events were stored after all; not saving them again",
            session.id, pending,
        )  # fmt: skip
        return pending
    return None
