"""Store URLs that used to end in someone else's traceback: a ``nats://`` store without the
``nats`` extra says which extra to install; a stream name with a trailing newline is refused by
the URL check; a PostgreSQL ``?schema=`` is always a quoted identifier (a name that needs quotes
works, an injection attempt is a name like any other and executes nothing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from psycopg import sql

from compaction.errors import ConfigurationError
from compaction.sessions.store import SessionStore
from tests.builders import run_json
from tests.conftest import ROOT

BLOCK_NATS = """
import sys
class _NoNats:
    def find_spec(self, name, path=None, target=None):
        if name == "nats" or name.startswith("nats."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _NoNats())
"""


def test_a_nats_store_without_the_extra_names_the_extra(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(BLOCK_NATS, encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "compaction.cli.main",
            "--store",
            "nats://127.0.0.1:4222",
            "sessions",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    error = json.loads(done.stdout)["error"]
    assert "pip install 'event-compaction[nats]'" in error["message"], error
    assert "nats" in error["message"] and "Traceback" not in done.stderr
    assert "Failed to resolve persistence module topic" not in error["message"]


@pytest.mark.parametrize("stream", ["name%0A", "name%0D", "na%0Ame", "name%00", "name%20"])
def test_a_stream_name_with_control_characters_is_refused(stream: str) -> None:
    with pytest.raises(ConfigurationError, match="is not a stream name"):
        SessionStore.open(f"nats://127.0.0.1:4222?stream={stream}")


@pytest.mark.parametrize("host", ["127.0.0.1:4222%0A", "127.0.0.1:4222\n"])
def test_a_server_with_a_trailing_newline_is_refused(host: str) -> None:
    with pytest.raises(ConfigurationError, match="is not a HOST:PORT"):
        SessionStore.open(f"nats://{host}")


SCHEMAS = ["Tenant-1", 'x"; CREATE TABLE pwned (i int); --', "o'brien.team"]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_a_schema_is_a_quoted_identifier(pg_url: str, schema: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    url = f"{pg_url}?schema={quote(schema)}"
    code, document = run_json("--store", url, "demo")
    assert code == 0, document
    code, listed = run_json("--store", url, "sessions")
    assert code == 0 and listed["sessions"], listed
    code, rebuilt = run_json("--store", url, "rebuild")
    assert code == 0, rebuilt
    with psycopg.connect(pg_url, autocommit=True) as connection:
        tables = connection.execute(
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
        ).fetchall()
    assert "pwned" not in {name for _, name in tables}
    assert {where for where, _ in tables} == {schema}, tables
