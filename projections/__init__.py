"""Read models folded from the store's notification log; droppable and rebuildable.

Three projections (and those of the installed ``compaction.projections`` plugins), each an
eventsourcing ``Projection`` with its own tracking record:

- ``surface`` (:mod:`projections.surface_view`): per session, the ordered surface and the replace
  generation, folded with the aggregate's own :class:`~compaction.sessions.surface.Surface`;
- ``ledger`` (:mod:`projections.ledger`): one row per compaction bracket with its outcome;
- ``usage`` (:mod:`projections.usage`): surface tokens per session now and at every step end.

:class:`FoldProjection` is the base of a view whose author writes only the fold: the library
keeps each session's state with the tracking record. :class:`ProjectionRunner` rebuilds them,
catches them up, or follows the log until stopped. Where the views live: next to a SQLite store
(``NAME.views.db``), in a PostgreSQL store's own database, or in memory for ``memory://``. See
``docs/projections.md``.
"""

from compaction.errors import (
    FollowerGaveUpError,
    ProjectionConfigError,
    ProjectionError,
    ProjectionFoldError,
    ProjectionTimeoutError,
    TrackingConflictError,
    ViewStoreError,
)
from projections.fold import FoldProjection
from projections.ledger import LedgerProjection, compactions
from projections.runner import (
    ALL,
    PROJECTIONS,
    ProjectionReport,
    ProjectionRunner,
    Reconnect,
    load_projections,
    projection_names,
    resolve_names,
    stop_on_signals,
)
from projections.surface_view import (
    SurfaceProjection,
    SurfaceRecord,
    surface_at,
    surface_of,
    surfaces,
)
from projections.usage import UsageProjection, steps_of, usage_of
from projections.views import ViewDatabase, ViewRecorder, default_views_path

__all__ = [
    "ALL",
    "PROJECTIONS",
    "FoldProjection",
    "FollowerGaveUpError",
    "LedgerProjection",
    "ProjectionConfigError",
    "ProjectionError",
    "ProjectionFoldError",
    "ProjectionReport",
    "ProjectionRunner",
    "ProjectionTimeoutError",
    "Reconnect",
    "SurfaceProjection",
    "SurfaceRecord",
    "TrackingConflictError",
    "UsageProjection",
    "ViewDatabase",
    "ViewRecorder",
    "ViewStoreError",
    "compactions",
    "default_views_path",
    "load_projections",
    "projection_names",
    "resolve_names",
    "steps_of",
    "stop_on_signals",
    "surface_at",
    "surface_of",
    "surfaces",
    "usage_of",
]
