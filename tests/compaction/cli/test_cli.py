"""The ``compaction`` command line: the JSON contract of docs/cli.md, errors, and human output.

Most tests call ``main([...])`` in-process; the installed ``compaction`` entry point runs as a real
subprocess for the full import of every public transcript and for the exit-status checks.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from compaction.cli.command import resolve_session
from compaction.cli.main import main
from compaction.errors import AmbiguousSessionError, SessionNotFoundError, UsageError
from compaction.sessions.blocks import Message, TextBlock
from compaction.sessions.events import UserMessage
from compaction.sessions.store import SessionStore
from tests.builders import Doc, run_human, run_json
from tests.conftest import PUBLIC_TRANSCRIPTS

ENTRY_POINT = Path(sys.executable).parent / "compaction"
IMPORT_KEYS = {
    "session_id", "source", "format", "status", "events", "messages", "tool_calls",
    "tool_results", "synthesized_results", "compactions", "skipped", "notes",
}  # fmt: skip
SESSION_KEYS = {"session_id", "events", "surface_nodes", "surface_tokens", "compactions"}
DEMO_KEYS = {
    "session_id", "events", "compactions", "tokens_before", "tokens_after", "checks_passed",
}  # fmt: skip


def assert_error(code: int, document: Doc, error_type: str, *fragments: str) -> None:
    assert code == 1, document
    assert set(document) == {"error"}
    assert document["error"]["type"] == error_type
    for fragment in fragments:
        assert fragment in document["error"]["message"]


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[Doc]]:
    """Every public transcript imported by the installed entry point into one SQLite store."""
    url = f"sqlite:///{tmp_path_factory.mktemp('cli') / 'sessions.db'}"
    files = [str(p) for p in PUBLIC_TRANSCRIPTS]
    done = subprocess.run(
        [str(ENTRY_POINT), "--store", url, "import", *files, "--json"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    rows: list[Doc] = json.loads(done.stdout)["sessions"]
    return url, rows


def richest(rows: list[Doc]) -> Doc:
    return max(rows, key=lambda r: (r["tool_calls"], r["session_id"]))


# ---------------------------------------------------------------- import


def test_import_every_public_transcript(imported: tuple[str, list[Doc]]) -> None:
    _, rows = imported
    assert PUBLIC_TRANSCRIPTS, "no public transcripts found"
    sources = {row["source"] for row in rows}
    for path in PUBLIC_TRANSCRIPTS:
        assert any(str(path) in source for source in sources), f"{path} imported no session"
    for row in rows:
        assert set(row) >= IMPORT_KEYS, row
        assert row["status"] == "imported"
        assert row["events"] > 0 and row["messages"] > 0
        assert 0 <= row["synthesized_results"] <= row["tool_results"] <= row["tool_calls"]
        assert all(isinstance(row[k], list) for k in ("skipped", "notes"))
    assert len({row["session_id"] for row in rows}) == len(rows)
    assert sum(row["tool_calls"] for row in rows) > 0
    assert sum(row["compactions"] for row in rows) > 0  # the spotter transcript holds one


def test_import_twice_reports_already_imported(imported: tuple[str, list[Doc]]) -> None:
    url, first = imported
    code, document = run_json("--store", url, "import", *map(str, PUBLIC_TRANSCRIPTS))
    assert code == 0
    again = document["sessions"]
    assert [r["session_id"] for r in again] == [r["session_id"] for r in first]
    assert {r["status"] for r in again} == {"already_imported"}
    code, listing = run_json("--store", url, "sessions")
    assert len(listing["sessions"]) == len(first)


def test_import_human_output_is_a_table(imported: tuple[str, list[Doc]]) -> None:
    url, _ = imported
    smallest = min(PUBLIC_TRANSCRIPTS, key=lambda p: p.stat().st_size)
    code, out, err = run_human("--store", url, "import", str(smallest))
    assert code == 0, err
    assert "0 imported, 1 already imported" in out and "already_imported" in out


def test_import_format_events_refuses_a_transcript(sqlite_url: str) -> None:
    code, document = run_json(
        "--store", sqlite_url, "import", str(PUBLIC_TRANSCRIPTS[0]), "--format", "events"
    )
    assert_error(code, document, "TranscriptError", ":1:", "not a native event export")


def test_import_missing_file_names_it(sqlite_url: str, tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    code, document = run_json("--store", sqlite_url, "import", str(missing))
    assert_error(code, document, "TranscriptError", str(missing))


# ---------------------------------------------------------------- sessions


def test_sessions_lists_every_imported_session(imported: tuple[str, list[Doc]]) -> None:
    url, rows = imported
    code, document = run_json("--store", url, "sessions")
    assert code == 0
    listed = {row["session_id"]: row for row in document["sessions"]}
    assert set(listed) == {row["session_id"] for row in rows}
    for row in rows:
        entry = listed[row["session_id"]]
        assert set(entry) >= SESSION_KEYS
        assert entry["events"] == row["events"]
        assert 0 < entry["surface_nodes"] <= entry["events"]
        assert entry["surface_tokens"] >= entry["surface_nodes"]
        assert entry["compactions"] == row["compactions"]  # foreign ones became compact/* brackets


def test_sessions_human_output_names_every_session(imported: tuple[str, list[Doc]]) -> None:
    url, rows = imported
    code, out, err = run_human("--store", url, "sessions")
    assert code == 0, err
    for row in rows:
        assert row["session_id"][:8] in out


def test_json_option_before_or_after_the_command(
    imported: tuple[str, list[Doc]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = imported
    after = run_json("--store", url, "sessions")
    assert main(["--json", "sessions", "--store", url]) == 0
    before = json.loads(capsys.readouterr().out)
    assert before == after[1]


# ---------------------------------------------------------------- show


def show(url: str, *argv: str) -> Doc:
    code, document = run_json("--store", url, "show", *argv)
    assert code == 0, document
    return document


def test_show_every_format_describes_the_same_surface(imported: tuple[str, list[Doc]]) -> None:
    url, rows = imported
    row = richest(rows)
    docs = {shape: show(url, row["session_id"], "--format", shape)
            for shape in ("openai", "anthropic", "text")}  # fmt: skip
    for shape, document in docs.items():
        assert document["session_id"] == row["session_id"]
        assert document["at"] == row["events"] - 1
        assert document["format"] == shape
        assert document["surface"] == docs["openai"]["surface"]
        assert all(0 <= seq < row["events"] for seq in document["surface"])
    openai, anthropic, text = (docs[s]["messages"] for s in ("openai", "anthropic", "text"))
    tool_messages = [m for m in openai if m["role"] == "tool"]
    calls = [c for m in openai for c in m.get("tool_calls", [])]
    blocks = [b for m in anthropic for b in m["content"]]
    assert tool_messages and calls
    assert len(tool_messages) == sum(b["type"] == "tool_result" for b in blocks)
    assert len(calls) == sum(b["type"] == "tool_use" for b in blocks)
    assert all(a["role"] != b["role"] for a, b in itertools.pairwise(anthropic))
    assert [{k: v for k, v in m.items() if k != "text"} for m in text] == openai
    rendered = "\n".join(m["text"] for m in text if m["text"])
    assert rendered.count("[tool-result ") == len(tool_messages)


def test_show_at_gives_the_surface_as_it_was_then(imported: tuple[str, list[Doc]]) -> None:
    url, rows = imported
    row = richest(rows)
    session_id = row["session_id"]
    with SessionStore.open(url) as store:
        session = store.get(UUID(session_id), use_snapshots=False)
        for at in (0, row["events"] // 3, row["events"] // 2, row["events"] - 1):
            document = show(url, session_id, "--at", str(at), "--format", "openai")
            assert document["at"] == at
            assert document["surface"] == session.surface_at(at)
    latest = show(url, session_id, "--format", "openai")
    assert show(url, session_id, "--at", str(latest["at"]), "--format", "openai") == latest


@pytest.mark.parametrize("at", ["-1", "events"])
def test_show_at_outside_the_log_is_a_clear_error(imported: tuple[str, list[Doc]], at: str) -> None:
    url, rows = imported
    row = richest(rows)
    seq = str(row["events"]) if at == "events" else at
    code, document = run_json("--store", url, "show", row["session_id"], "--at", seq)
    assert_error(code, document, "StoreError", f"cannot load it at seq {seq}")


def test_show_accepts_a_unique_prefix(imported: tuple[str, list[Doc]]) -> None:
    url, rows = imported
    session_id = richest(rows)["session_id"]
    assert show(url, session_id[:13].upper())["session_id"] == session_id


@pytest.mark.parametrize("wanted", ["zzz", "00000000-0000-0000-0000-000000000000"])
def test_show_unknown_session_is_a_json_error(imported: tuple[str, list[Doc]], wanted: str) -> None:
    url, _ = imported
    code, document = run_json("--store", url, "show", wanted)
    assert_error(code, document, "SessionNotFoundError", wanted)


def test_show_human_output_is_the_text_rendering(imported: tuple[str, list[Doc]]) -> None:
    url, rows = imported
    row = richest(rows)
    code, out, err = run_human("--store", url, "show", row["session_id"])
    assert code == 0, err
    assert f"session {row['session_id']}" in err  # the header: stdout holds the rendering alone
    assert out.startswith(("--- ", "system prompt")) and "[tool-result " in out


def test_resolve_session_prefixes() -> None:
    ids = [UUID(f"aaaa0000-0000-0000-0000-00000000000{n}") for n in (1, 2)]
    with SessionStore.open("memory://") as store:
        for session_id in ids:
            session = store.create(session_id)
            message = Message(id=f"m-{session_id}", role="user", content=(TextBlock("hi"),))
            session.append(UserMessage(message=message, surface_op="append"))
            store.save(session)
        with pytest.raises(AmbiguousSessionError, match="matches 2 sessions"):
            resolve_session(store, "AAAA")
        assert resolve_session(store, "aaaa0000000000000000000000000002") == ids[1]
        assert resolve_session(store, str(ids[0])) == ids[0]
        with pytest.raises(SessionNotFoundError):
            resolve_session(store, "bbbb")
        with pytest.raises(UsageError, match="expected a session id or a unique prefix"):
            resolve_session(store, "")


# ---------------------------------------------------------------- demo


def test_demo_json_document(sqlite_url: str) -> None:
    code, document = run_json("--store", sqlite_url, "demo", "--turns", "1", "--steps", "6", "--no-phases")
    assert code == 0, document
    assert set(document) >= DEMO_KEYS
    assert document["checks_passed"] is True
    assert document["compactions"] == 0 and document["compaction_log"] == []
    assert document["tokens_before"] > 0 and document["tokens_after"] > 0
    assert document["strategies"] == []
    code, listing = run_json("--store", sqlite_url, "sessions")
    (row,) = listing["sessions"]
    assert row["session_id"] == document["session_id"]
    assert row["events"] == document["events"]
    assert 0 < row["surface_tokens"] <= document["tokens_before"]


def test_demo_compacts_a_long_session_and_every_invariant_holds(sqlite_url: str) -> None:
    code, document = run_json("--store", sqlite_url, "demo", "--window", "12000")
    assert code == 0, [c for c in document.get("checks", []) if not c["passed"]]
    assert document["checks_passed"] is True
    assert document["compactions"] == len(document["compaction_log"]) >= 2
    assert all(e["tokens_after"] < e["tokens_before"] for e in document["compaction_log"])
    assert document["max_request_tokens"] < document["window"] == 12000
    assert document["tokens_after"] < document["tokens_before"] / 3
    names = {c["name"] for c in document["checks"]}
    assert {"bracket", "content-hashes", "within-window", "task-statement-first"} <= names
    strategies = {run["strategy"]: run for run in document["strategies"]}
    assert set(strategies) == {"checkpoint", "summary"}
    for run in strategies.values():
        assert all(b["compacted"] and b["tokens_after"] < b["tokens_before"] for b in run["boundaries"])


def test_demo_uses_the_store_from_the_environment(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPACTION_STORE", sqlite_url)
    code, out, err = run_human("demo", "--turns", "1", "--steps", "3")
    assert code == 0, err
    assert "every invariant held" in out
    with SessionStore.open(sqlite_url) as store:
        assert len(store.session_ids()) == 3  # the demo session and the two phase-workflow runs


# ---------------------------------------------------------------- errors


def test_bad_store_url_is_one_clear_line() -> None:
    code, document = run_json("--store", "bogus://x", "sessions")
    assert_error(code, document, "ConfigurationError", "bogus://x", "sqlite:///PATH")
    code, out, err = run_human("--store", "bogus://x", "sessions")
    assert code == 1 and out == ""
    assert err.startswith("compaction: error: unsupported store URL 'bogus://x'")
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "argv",
    [[], ["show"], ["nope"], ["demo", "--turns", "0"], ["show", "x", "--format", "yaml"]],
)
def test_usage_errors_exit_2(argv: list[str]) -> None:
    code, out, err = run_human(*argv)
    assert code == 2 and out == ""
    assert "usage: compaction" in err and "Traceback" not in err
    code, document = run_json(*argv)
    assert code == 2
    assert document["error"]["type"] == "UsageError"


def test_installed_entry_point_exit_status_and_json_error() -> None:
    done = subprocess.run(
        [str(ENTRY_POINT), "--store", "bogus://x", "sessions", "--json"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert json.loads(done.stdout)["error"]["type"] == "ConfigurationError"
    assert "Traceback" not in done.stderr
    version = subprocess.run(
        [str(ENTRY_POINT), "--version"], capture_output=True, text=True, timeout=60, check=True
    )
    assert version.stdout.startswith("compaction ")


@pytest.mark.parametrize(
    ("extra", "expected"),
    [([], 8192), (["--summarizer", "local"], 512), (["--summarizer", "local", "--max-tokens", "320"], 320)],
)
def test_compact_max_tokens_default_follows_the_summarizer(extra: list[str], expected: int) -> None:
    """The embedded model's 4096-token window cannot take the 8192 default cap: local gets 512."""
    from compaction.cli import cmd_compact
    from compaction.cli.main import build_parser

    args = build_parser().parse_args(["compact", "abc", *extra])
    assert cmd_compact._config(args).max_tokens == expected


def test_ctrl_c_under_json_still_prints_one_error_document(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import dataclasses

    from compaction.cli import main as cli_main

    def interrupted(context: object, args: object) -> dict[str, Any]:
        raise KeyboardInterrupt

    commands = tuple(
        dataclasses.replace(c, run=interrupted) if c.name == "sessions" else c for c in cli_main.COMMANDS
    )
    monkeypatch.setattr(cli_main, "COMMANDS", commands)
    code = main(["--store", "memory://", "sessions", "--json"])
    captured = capsys.readouterr()
    assert code == 130
    assert json.loads(captured.out) == {"error": {"type": "KeyboardInterrupt", "message": "interrupted"}}
    assert "interrupted" in captured.err
