"""``copy --to postgresql://.../NAME`` on a server without that database creates it (the target of
a copy is a new store, as a SQLite path is); any other command opening a missing database says
exactly how to create it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.builders import run_json
from tests.conftest import PG_BASE, drop_pg_database, require_pg


@pytest.fixture
def missing_database() -> Iterator[str]:
    """The URL of a database this test's server does not have (dropped afterwards if made)."""
    require_pg()
    url = f"{PG_BASE}/compaction_test_new_{uuid.uuid4().hex[:10]}"
    try:
        yield url
    finally:
        drop_pg_database(url)


def test_copy_creates_a_missing_target_database(sqlite_url: str, missing_database: str) -> None:
    assert run_json("--store", sqlite_url, "demo")[0] == 0
    code, document = run_json("--store", sqlite_url, "copy", "--to", missing_database, "--all")
    assert code == 0, document
    assert document["verified"] and document["sessions"], document
    code, listed = run_json("--store", missing_database, "sessions")
    assert code == 0 and len(listed["sessions"]) == len(document["sessions"])


def test_another_command_says_how_to_create_a_missing_database(missing_database: str) -> None:
    name = missing_database.rsplit("/", 1)[1]
    code, document = run_json("--store", missing_database, "sessions")
    assert code == 1
    message = document["error"]["message"]
    assert f'database "{name}" does not exist' in message, message
    assert f"createdb -h 127.0.0.1 -p 5432 -U postgres {name}" in message, message
    assert "compaction copy --to" in message
