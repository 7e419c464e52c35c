"""Projection errors, under the library root :class:`~sessions.errors.EventCompactionError`.

    ProjectionError
    ├── ProjectionConfigError (ConfigurationError)  unknown projection, bad views path or option
    ├── ViewStoreError (StoreError)                 the view database failed (driver error inside)
    ├── TrackingConflictError                       another runner already applied the batch
    ├── ProjectionTimeoutError (TimeoutError)       a view did not reach a position in time
    └── ProjectionFoldError                         a stored event does not fold (corrupt log)

A failed batch leaves the view and its tracking record exactly as they were before the batch.
"""

from __future__ import annotations

from sessions.errors import ConfigurationError, EventCompactionError, StoreError


class ProjectionError(EventCompactionError):
    """Root of projection failures."""


class ProjectionConfigError(ProjectionError, ConfigurationError):
    """An unknown projection name, an unusable views location, or a bad runner option."""


class ViewStoreError(ProjectionError, StoreError):
    """The view database refused a read or a write; the message names the view and the operation."""


class TrackingConflictError(ProjectionError):
    """The view's tracking record is already at or past the batch: another runner applied it."""

    def __init__(self, projection: str, expected: int, recorded: int | None) -> None:
        self.projection = projection
        self.expected = expected
        self.recorded = recorded
        super().__init__(
            f"projection {projection!r}: expected the view's tracking record at notification "
            f"{expected}, found {recorded} (another runner is writing this view, or it was "
            "rebuilt meanwhile); nothing of this batch was written. Run one runner per view; "
            "restart this one to resume from the tracking record."
        )


class ProjectionTimeoutError(ProjectionError, TimeoutError):
    """A view did not record the awaited notification before the timeout."""


class ProjectionFoldError(ProjectionError):
    """A stored event could not be folded; names the projection, session, seq and notification."""

    def __init__(
        self, projection: str, session_id: object, seq: int, notification_id: int, reason: str
    ) -> None:
        self.projection = projection
        self.session_id = session_id
        self.seq = seq
        self.notification_id = notification_id
        super().__init__(
            f"projection {projection!r}: session {session_id} seq {seq} (notification "
            f"{notification_id}) does not fold: {reason}; nothing of this batch was written"
        )
