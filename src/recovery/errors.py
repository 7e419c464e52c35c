"""Recovery errors, under the library root :class:`~sessions.errors.EventCompactionError`.

    RecoveryError
    ├── RecoveryConfigError (ConfigurationError too)  a bad RecoveryConfig value
    ├── OrphanCorruptionError     an orphaned compact/start is not inert (its events changed the
    │                             surface, or a replacement cites it): the commit was not atomic
    └── RepairConflictError       other writers kept appending to the session while recovery tried
                                  to close its orphan; nothing was written
"""

from __future__ import annotations

from collections.abc import Sequence

from sessions.errors import ConfigurationError, EventCompactionError


class RecoveryError(EventCompactionError):
    """Root of recovery failures."""


class RecoveryConfigError(RecoveryError, ConfigurationError):
    pass


class OrphanCorruptionError(RecoveryError):
    """One or more orphans are not inert; ``evidence`` holds one line per finding."""

    def __init__(self, message: str, evidence: Sequence[str]) -> None:
        self.evidence = tuple(evidence)
        detail = "".join(f"\n  - {line}" for line in self.evidence)
        super().__init__(f"{message}{detail}")


class RepairConflictError(RecoveryError):
    pass
