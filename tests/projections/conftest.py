"""Fixtures the projection tests share: the views of a module's ``store`` fixture as another
process sees them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from compaction.sessions.store import SessionStore
from projections import ALL, PROJECTIONS, ViewDatabase, ViewRecorder


@pytest.fixture
def probe(store: SessionStore) -> Iterator[dict[str, ViewRecorder]]:
    """The views as another process sees them (tables created before any child starts); each
    module gives its own ``store``."""
    database = ViewDatabase(store)
    try:
        yield {name: database.recorder(name, PROJECTIONS[name].tables) for name in ALL}
    finally:
        database.close()
