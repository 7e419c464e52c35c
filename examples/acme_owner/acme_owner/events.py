"""``acme/owner``: who the session works for. A log-only event (no ``surface_op``): the model never
sees it, the library's own folds pass over it, the audit checks it like its own log-only events."""

from __future__ import annotations

from typing import ClassVar

from compaction.sessions.events import SessionEvent


class OwnerSet(SessionEvent, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = "acme/owner"
    user: str
