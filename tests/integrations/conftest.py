"""Fixtures of the framework tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def url(tmp_path: Path) -> str:
    """A SQLite store of the test's own."""
    return f"sqlite:///{tmp_path / 'sessions.db'}"
