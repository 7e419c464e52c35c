"""View recorders per backend (SQLite, PostgreSQL, in-memory) and where a store's views live."""

from projections.views.base import ViewRecorder
from projections.views.database import ViewDatabase, default_views_path
from projections.views.memory import MemoryView
from projections.views.postgres import PostgresView
from projections.views.sqlite import SQLiteView

__all__ = [
    "MemoryView",
    "PostgresView",
    "SQLiteView",
    "ViewDatabase",
    "ViewRecorder",
    "default_views_path",
]
