"""Fixtures of the framework tests: each store a test writes is audited when the test ends.

``compaction audit --all`` (the command line, in this process) runs over the test's SQLite store
(``url``) and PostgreSQL database (``pg_url``) once the test is done with them, and the test fails
when the audit does not pass: every compaction the adapters made re-checks, every session's log
holds its invariants."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.builders import run_json


def audit_store(url: str) -> None:
    """``compaction audit --all --store <url>``: fails the test unless it passes."""
    code, doc = run_json("--store", url, "audit", "--all")
    if code != 0 or doc.get("passed") is not True:
        pytest.fail(f"compaction audit --all --store {url} did not pass: {json.dumps(doc)[:2000]}")


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    """A SQLite store of the test's own, audited when the test ends (when the test wrote it)."""
    path = tmp_path / "sessions.db"
    yield f"sqlite:///{path}"
    if path.exists():
        audit_store(f"sqlite:///{path}")


@pytest.fixture
def pg_url(pg_url: str) -> Iterator[str]:
    """A PostgreSQL database of the test's own (the suite's fixture), audited when the test ends,
    before it is dropped."""
    yield pg_url
    audit_store(pg_url)
