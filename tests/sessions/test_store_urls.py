"""Store URLs and opening a store: clear errors, never a traceback, never a silent loss,
PostgreSQL failures that name their cause at once, read-only commands that refuse a store that
does not exist, and the summarizer base URL."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from compaction.errors import ConfigurationError, StoreError, StoreNotFoundError
from compaction.sessions.store import SessionStore, parse_store_url
from tests.builders import answer_step, end_turn, run_human, run_json, start_turn, user

HOSTILE = {
    "postgresql://postgres@127.0.0.1:99999/db": "Port out of range",
    "postgresql://postgres@127.0.0.1:abc/db": "Port could not be cast to integer",
    "postgresql://postgres@[::1/db": "Invalid IPv6 URL",
    "postgresql://postgres@127.0.0.1:0/db": "port 0 is not a port",
    "postgresql://postgres@127.0.0.1/db?lock_timeout=soon": "lock_timeout: expected a whole number",
    "postgresql://postgres@127.0.0.1/db?colour=red": "unknown parameter 'colour'",
    "sqlite:///%00x.db": "contains a NUL byte",
    "sqlite:////proc/nope/x.db": "cannot create the folder '/proc/nope'",
    "sqlite:///file:data.db?mode=memory": "take no query parameters (found 'mode=memory')",
    "sqlite:///file:data.db": "is an SQLite URI filename",
    "sqlite:///FILE:x.db": "is an SQLite URI filename",
    "sqlite:///x.db?cache=shared": "take no query parameters",
}


@pytest.mark.parametrize("url", sorted(HOSTILE))
def test_hostile_store_urls_are_configuration_errors(url: str) -> None:
    with pytest.raises(ConfigurationError, match=HOSTILE[url].replace("(", r"\(").replace(")", r"\)")):
        SessionStore.open(url)


@pytest.mark.parametrize("url", sorted(HOSTILE))
@pytest.mark.parametrize("command", ["sessions", "import"])
def test_hostile_store_urls_print_an_error_not_a_traceback(
    url: str, command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    transcript = tmp_path / "t.jsonl"
    transcript.write_text('{"role": "user", "content": "hi"}\n')
    argv = ["--store", url, command] + ([str(transcript)] if command == "import" else [])
    code, out, err = run_human(*argv)  # an uncaught exception would propagate here
    assert code == 1, (out, err)
    assert "Traceback" not in err and "compaction: error:" in err
    assert [p.name for p in tmp_path.iterdir()] == ["t.jsonl"]  # no stray ./file:... path


def test_a_password_in_a_malformed_url_is_not_printed() -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_store_url("postgresql://alice:s3cret@db:99999/x")
    assert "s3cret" not in str(caught.value) and "alice:***@db" in str(caught.value)


def test_sqlite_memory_and_percent_encoded_paths_still_open(tmp_path: Path) -> None:
    with SessionStore.open("sqlite:///:memory:") as store:
        assert store.session_ids() == []
    with SessionStore.open(f"sqlite:///{tmp_path}/with%20space.db") as store:
        assert store.backend == "sqlite"
    assert (tmp_path / "with space.db").is_file()


# ---------------------------------------------------------------- read-only opens (14.15)


def test_a_read_only_open_refuses_a_missing_sqlite_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/nonexistent/dir/x.db"
    with pytest.raises(StoreNotFoundError, match=r"nonexistent/dir/x\.db does not exist"):
        SessionStore.open(url, create=False)
    assert not (tmp_path / "nonexistent").exists()
    with pytest.raises(StoreNotFoundError, match="is not a file"):
        SessionStore.open(f"sqlite:///{tmp_path}", create=False)


@pytest.mark.parametrize(
    "argv",
    [["sessions"], ["show", "0000"], ["audit", "--all"]],
    ids=lambda a: a[0],
)
def test_read_only_commands_do_not_create_a_store(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, document = run_json("--store", "sqlite:///nonexistent/dir/x.db", *argv)
    assert code == 1
    assert document["error"]["type"] == "StoreNotFoundError"
    assert "does not exist" in document["error"]["message"]
    assert list(tmp_path.iterdir()) == []


def test_read_only_commands_read_an_existing_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    with SessionStore.open(url) as store:
        session = store.create()
        user(session, "hello")
        store.save(session)
    code, document = run_json("--store", url, "sessions")
    assert code == 0 and [r["session_id"] for r in document["sessions"]] == [str(session.id)]


# ---------------------------------------------------------------- PostgreSQL failures (14.10)


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("postgresql://postgres@127.0.0.1:5499/postgres", "Connection refused"),
        ("postgresql://postgres@127.0.0.1:5432/no_such_db", 'database "no_such_db" does not exist'),
        ("postgresql://no_such_role@127.0.0.1:5432/postgres", 'role "no_such_role" does not exist'),
    ],
    ids=["port", "database", "user"],
)
def test_postgres_failures_name_the_cause_at_once(url: str, reason: str) -> None:
    from tests.conftest import require_pg

    require_pg()
    began = time.perf_counter()
    with pytest.raises(StoreError, match=reason):
        SessionStore.open(url)
    assert time.perf_counter() - began < 2.0
    code, _, err = run_human("--store", url, "sessions")
    assert code == 1 and reason in " ".join(err.split()) and "couldn't get a connection" not in err


# ---------------------------------------------------------------- the summarizer base URL


@pytest.mark.parametrize(
    ("base_url", "fragment"),
    [
        ("http://user:pw@host", "carries credentials"),
        ("http://host:99999", "Port out of range"),
        ("http://[::1", "Invalid IPv6 URL"),
    ],
)
def test_a_bad_summarizer_base_url_is_an_error_not_a_traceback(
    base_url: str, fragment: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    url = f"sqlite:///{tmp_path}/s.db"
    with SessionStore.open(url) as store:
        session = store.create()
        user(session, "Please fix the failing tests")
        start_turn(session)
        answer_step(session, "done " * 200)
        end_turn(session)
        store.save(session)
    code, out, err = run_human(
        "--store",
        url,
        "compact",
        str(session.id),
        "--summarizer",
        "openai",
        "--base-url",
        base_url,
        "--model",
        "m",
        "--manual",
    )
    assert code == 1, (out, err)
    assert fragment in " ".join(err.split()) and "Traceback" not in err
    assert "pw@" not in err
