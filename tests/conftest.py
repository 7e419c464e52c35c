"""Shared fixtures: store URLs (and open stores) for every backend, real transcripts, PostgreSQL databases.

PostgreSQL tests run against the server on 127.0.0.1:5432 (override with ``COMPACTION_TEST_PG``,
a URL without the database). Each test run creates its own databases and drops them. When the
server is unreachable the PostgreSQL tests skip locally, but under ``CI=true`` they fail loudly.
NATS JetStream tests run against 127.0.0.1:4222 (``COMPACTION_TEST_NATS``), each on a stream of its
own, deleted afterwards; the same rule applies when the server is down.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from compaction.sessions.store import SessionStore

ROOT = Path(__file__).resolve().parents[1]
"""The repository root."""
TRANSCRIPTS = ROOT / "tests" / "data" / "transcripts"
"""Public agent transcripts (MIT), kept in the repository with their licences: see SOURCES.md there."""

LICENSED = {p.name.split(".")[0] for p in (TRANSCRIPTS / "LICENSES").iterdir()}
"""The directories of TRANSCRIPTS holding public transcripts (each has its licence in LICENSES);
the others hold fixtures written by hand (a README there says so)."""
PUBLIC_TRANSCRIPTS: list[Path] = sorted(
    p
    for p in TRANSCRIPTS.rglob("*")
    if p.is_file()
    and p.suffix in {".jsonl", ".traj", ".json"}
    and p.relative_to(TRANSCRIPTS).parts[0] in LICENSED
    and "subagents" not in p.parts
)


@pytest.fixture(autouse=True)
def _terminal_size_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line's tables follow ``COLUMNS`` when it is set; pytest-xdist's workers set it
    (80), a plain pytest run does not. Tests that want a width set it themselves."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)


PG_BASE = os.environ.get("COMPACTION_TEST_PG", "postgresql://postgres@127.0.0.1:5432")
NATS_BASE = os.environ.get("COMPACTION_TEST_NATS", "nats://127.0.0.1:4222")


def pytest_configure(config: pytest.Config) -> None:
    """The transcript tests are parametrized over the real files: with none found they would
    silently run nothing, so a damaged checkout stops the run instead."""
    if len(PUBLIC_TRANSCRIPTS) < 8:
        raise pytest.UsageError(
            f"expected the 8 public transcripts under {TRANSCRIPTS} (part of the repository); "
            f"found {len(PUBLIC_TRANSCRIPTS)}"
        )


def _pg_admin_connect() -> object:
    import psycopg

    return psycopg.connect(f"{PG_BASE}/postgres", autocommit=True, connect_timeout=3)


def pg_available() -> str | None:
    """None when PostgreSQL answers, else the reason it does not."""
    try:
        conn = _pg_admin_connect()
    except Exception as e:  # any driver failure means "not available"
        return str(e)
    conn.close()  # type: ignore[attr-defined]
    return None


def require_pg() -> None:
    reason = pg_available()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"PostgreSQL is required under CI=true but is unreachable at {PG_BASE}: {reason}")
    pytest.skip(f"PostgreSQL unreachable at {PG_BASE}: {reason}")


def create_pg_database() -> str:
    """Create a fresh database; return its URL. Drop it with :func:`drop_pg_database`."""
    require_pg()
    name = f"compaction_test_{uuid.uuid4().hex[:12]}"
    conn = _pg_admin_connect()
    conn.execute(f'CREATE DATABASE "{name}"')  # type: ignore[attr-defined]
    conn.close()  # type: ignore[attr-defined]
    return f"{PG_BASE}/{name}"


def drop_pg_database(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    conn = _pg_admin_connect()
    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[attr-defined]
    conn.close()  # type: ignore[attr-defined]


@pytest.fixture
def pg_url() -> Iterator[str]:
    url = create_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(url)


def nats_available(base: str = NATS_BASE) -> str | None:
    """None when a NATS server answers at ``base`` (a plain TCP connect and its INFO line), else
    the reason it does not."""
    import socket

    host, _, port = base[len("nats://") :].split(",", 1)[0].rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=3) as sock:
            greeting = sock.recv(4096)
    except OSError as e:
        return str(e)
    return (
        None
        if greeting.startswith(b"INFO ") and b'"jetstream":true' in greeting
        else (f"the server at {base} did not announce JetStream")
    )


def require_nats() -> None:
    try:
        import nats  # noqa: F401
    except ImportError as e:
        reason: str | None = f"nats-py is not installed ({e}); pip install 'event-compaction[nats]'"
    else:
        reason = nats_available()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"NATS JetStream is required under CI=true but unusable at {NATS_BASE}: {reason}")
    pytest.skip(f"NATS JetStream unusable at {NATS_BASE}: {reason}")


def delete_nats_streams(base: str, *streams: str) -> None:
    """Delete the streams a test created, and their key-value buckets (the streams ``KV_<name>``)."""
    import asyncio

    import nats
    import nats.js.errors

    async def delete_one(js: Any, name: str) -> None:
        """Deleted, or not there; retried while a cluster that just lost a node elects leaders."""
        for attempt in range(20):
            try:
                await js.delete_stream(name)
                return
            except nats.js.errors.NotFoundError:
                return
            except (nats.errors.TimeoutError, nats.js.errors.ServiceUnavailableError):
                if attempt == 19:
                    raise
                await asyncio.sleep(0.5)

    async def delete() -> None:
        nc = await nats.connect(base.split(","), connect_timeout=5)
        try:
            js = nc.jetstream()
            for stream in streams:
                for name in (
                    stream, f"{stream}_chunks", f"KV_{stream}_snapshots", f"KV_{stream}_leases",
                    f"KV_{stream}_tracking",
                ):  # fmt: skip
                    await delete_one(js, name)
        finally:
            await nc.close()

    asyncio.run(delete())


@pytest.fixture
def nats_url() -> Iterator[str]:
    """A store URL on the local JetStream server with a stream of its own, deleted afterwards."""
    require_nats()
    stream = f"test_{uuid.uuid4().hex[:12]}"
    try:
        yield f"{NATS_BASE}?stream={stream}"
    finally:
        delete_nats_streams(NATS_BASE, stream)
        # the projections' default views file of a JetStream store (./.compaction/STREAM.views.db)
        for folder in {Path.cwd(), ROOT}:
            (folder / ".compaction" / f"{stream}.views.db").unlink(missing_ok=True)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'sessions.db'}"


def _backend_url(request: pytest.FixtureRequest) -> str:
    """The URL of the backend ``request.param`` names: the test's ``sqlite_url``, ``pg_url`` or
    ``nats_url``."""
    if request.param == "memory":
        return "memory://"
    fixtures = {"sqlite": "sqlite_url", "postgresql": "pg_url", "nats": "nats_url"}
    return str(request.getfixturevalue(fixtures[request.param]))


@pytest.fixture(params=["memory", "sqlite", "postgresql", "nats"])
def store_url(request: pytest.FixtureRequest) -> str:
    """One URL per backend: the abstract suites run once per backend."""
    return _backend_url(request)


@pytest.fixture(params=["sqlite", "postgresql", "nats"])
def durable_store_url(request: pytest.FixtureRequest) -> str:
    """Backends that two processes can share."""
    return _backend_url(request)


@pytest.fixture(params=["sqlite", "postgresql"])
def table_store_url(request: pytest.FixtureRequest) -> str:
    """The durable backends whose events and snapshots live in database tables (where a trigger
    can refuse a write)."""
    return _backend_url(request)


@pytest.fixture
def store(store_url: str) -> Iterator[SessionStore]:
    """An open store on each backend in turn (see ``store_url``)."""
    from compaction.sessions.store import SessionStore

    with SessionStore.open(store_url) as opened:
        yield opened
