"""Settling one orphan: prove it inert, then (only when asked, and only when stale) close it.

The repair appends, in ONE atomic save:

1. ``compact/end {compaction_id, turn, error: "abandoned: <why it is stale>; closed by recovery on
   <host> pid <pid>"}``, which releases the lock;
2. the interrupted-turn closers (:mod:`recovery.closers`), only when the orphan owned
   a turn (``turn`` is a number), that turn is still the open one, and the orphan is stale because
   its owner is gone or its lease expired (after a ``session/resume`` the open turn, if any, belongs
   to the new lifecycle and is left alone).

The save is an optimistic-concurrency append: if anything else was appended meanwhile the save
fails, the session is reloaded, and the orphan is settled again (it may have been closed by its
owner or another recovery, which makes this a no-op). A repair never runs on a live orphan or on one
that is not inert. Running it twice writes nothing the second time.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from typing import Literal

from compaction.engine.brackets import is_closed
from compaction.engine.lock import clear_failure
from compaction.errors import ConcurrencyError, RepairConflictError
from compaction.sessions.events import SessionEvent
from compaction.sessions.interrupted import open_turn
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from compaction.vocabulary.events import CompactEnd
from recovery.closers import interrupted_turn_closers
from recovery.inertness import InertnessProof, prove_inert
from recovery.liveness import Liveness
from recovery.scan import Orphan

log = logging.getLogger("recovery")

Action = Literal[
    "none", "would-repair", "repaired", "already-closed", "refused-corrupt", "conflict", "unreadable"
]
ABANDONED = "abandoned"
ATTEMPTS = 3


@dataclass(frozen=True)
class Settlement:
    """What happened to one orphan: the proof (on the log the action saw) and the action."""

    action: Action
    proof: InertnessProof | None  # None when the orphan was already closed
    end_seq: int | None = None
    closer_seqs: tuple[int, ...] = ()


def settle(store: SessionStore, orphan: Orphan, liveness: Liveness, *, repair: bool) -> Settlement:
    """Prove ``orphan`` inert and, if ``repair`` and it is stale, close it (see the module doc)."""
    for _ in range(ATTEMPTS):
        session = store.get(orphan.session_id)
        if is_closed(session, orphan.start):
            return Settlement("already-closed", None)
        proof = prove_inert(session, orphan.start)
        if not proof.inert:
            return Settlement("refused-corrupt", proof)
        if not liveness.stale:
            return Settlement("none", proof)
        if not repair:
            return Settlement("would-repair", proof)
        appended = close_orphan(session, orphan, liveness)
        try:
            store.save(session)
        except ConcurrencyError:
            log.info(
                "recovery: session %s changed while closing %s; reloading",
                orphan.session_id,
                orphan.compaction_id,
            )
            continue
        if liveness.rule == "owner-failed":
            clear_failure(orphan.compaction_id)
        return Settlement("repaired", proof, appended[0].seq, tuple(e.seq for e in appended[1:]))
    raise RepairConflictError(
        f"recovery: could not close compaction {orphan.compaction_id} (compact/start seq "
        f"{orphan.start_seq}) in session {orphan.session_id}: other writers appended first "
        f"{ATTEMPTS} times in a row; nothing was written. Run recovery again."
    )


def close_orphan(session: Session, orphan: Orphan, liveness: Liveness) -> list[SessionEvent]:
    """Append (unsaved) the abandoned ``compact/end`` and, when they apply, the turn closers."""
    start = orphan.start
    error = f"{ABANDONED}: {liveness.reason}; closed by recovery on {socket.gethostname()} pid {os.getpid()}"
    end = CompactEnd(
        compaction_id=start.compaction_id,
        turn=start.turn,
        error=error,
        source_command_id=start.source_command_id,  # a /compact's bracket is closed as its own
    )
    appended = [session.append(end)]
    if _owns_open_turn(session, orphan, liveness):
        appended.extend(session.append_all(interrupted_turn_closers(session)))
    return appended


def _owns_open_turn(session: Session, orphan: Orphan, liveness: Liveness) -> bool:
    if orphan.start.turn is None or liveness.rule not in ("lease-expired", "owner-gone"):
        return False
    opened = open_turn(session)
    return opened is not None and opened.turn == orphan.start.turn
