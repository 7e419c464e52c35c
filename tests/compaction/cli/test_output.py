"""What the command line prints for people: data on stdout, commentary on stderr, for every
command; tables that never cut an id, a seq or a header, at 80 columns too; every id the audit
lists accepted by ``audit --request``; the demo's closing lines true for its store; ``show``
streaming a huge message; ``--help`` stating the rule and the exit statuses."""

from __future__ import annotations

import io
import json
import shlex
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from rich.cells import cell_len
from rich.console import Console

from compaction.cli.output import table
from compaction.sessions.store import SessionStore
from tests.builders import run_human, run_json, turn
from tests.conftest import ROOT, TRANSCRIPTS

ENTRY_POINT = Path(sys.executable).parent / "compaction"
CLAUDE_SAMPLE = next((TRANSCRIPTS / "claude-code-log").glob("*claude-code-log-sample/*.jsonl"))
PI_SESSION = TRANSCRIPTS / "pi-mono" / "large-session.jsonl"


@pytest.fixture(scope="module")
def compacted(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A SQLite store holding one session compacted by tool-result pruning, then by a summary."""
    url = f"sqlite:///{tmp_path_factory.mktemp('output') / 'sessions.db'}"
    with SessionStore.open(url) as store:
        session = store.create()
        for number in range(4):
            turn(session, f"task {number}", steps=3, output="line of output\n" * 3000, window=200000)
        store.save(session)
    session_id = str(session.id)
    code, pruned = run_json("--store", url, "compact", session_id, "--strategy", "prune")
    assert code == 0 and pruned["pruned"], pruned
    code, summarized = run_json("--store", url, "compact", session_id, "--manual", "--window", "20000")
    assert code == 0 and summarized["compactions"], summarized
    return url, session_id


def wide_lines(text: str, width: int) -> list[str]:
    return [line for line in text.splitlines() if cell_len(line) > width]


# ---------------------------------------------------------------- show


def test_show_text_prints_the_rendering_alone(compacted: tuple[str, str]) -> None:
    url, session_id = compacted
    _, document = run_json("--store", url, "show", session_id)
    code, out, err = run_human("--store", url, "show", session_id)
    assert code == 0, err
    system = f"system prompt (request/header):\n{document['system']}\n" if document.get("system") else ""
    assert out == system + "".join(f"{m['text']}\n" for m in document["messages"] if m["text"])
    assert f"session {session_id} at seq {document['at']}" in err  # the header, on stderr


@pytest.mark.parametrize("shape", ["openai", "anthropic"])
def test_show_provider_shape_stdout_is_one_json_array(compacted: tuple[str, str], shape: str) -> None:
    """``show X --format openai > msgs.json`` writes a valid file: no header before the JSON."""
    url, session_id = compacted
    _, document = run_json("--store", url, "show", session_id, "--format", shape)
    code, out, err = run_human("--store", url, "show", session_id, "--format", shape)
    assert code == 0, err
    assert json.loads(out) == document["messages"]
    assert len(out.splitlines()) == len(document["messages"]) + 2  # one message per line
    assert f"session {session_id}" in err and f"{shape} format" in err


@pytest.mark.parametrize("argument", ["", "  "])
def test_show_an_empty_session_argument_is_a_usage_error(compacted: tuple[str, str], argument: str) -> None:
    url, _ = compacted
    code, document = run_json("--store", url, "show", argument)
    assert code == 2
    assert document["error"]["type"] == "UsageError"
    assert "expected a session id or a unique prefix" in document["error"]["message"]
    code, out, err = run_human("--store", url, "show", argument)
    assert (code, out) == (2, "")
    assert "SESSION argument" in err and "no session" not in err


def test_export_to_stdout_prints_the_events_alone(compacted: tuple[str, str], tmp_path: Path) -> None:
    url, session_id = compacted
    code, out, err = run_human("--store", url, "export", session_id, "--out", "-")
    assert code == 0, err
    path = tmp_path / "session.events.jsonl"
    assert run_json("--store", url, "export", session_id, "--out", str(path))[0] == 0
    assert out == path.read_text(encoding="utf-8")


# ---------------------------------------------------------------- audit


def listed_ids(url: str, session_id: str) -> list[str]:
    code, document = run_json("--store", url, "audit", session_id)
    assert code == 0, document
    return [c["compaction_id"] for c in document["sessions"][0]["compactions"]]


def test_every_id_the_audit_lists_is_accepted_by_request(compacted: tuple[str, str]) -> None:
    url, session_id = compacted
    ids = listed_ids(url, session_id)
    assert any(i.startswith("prune-") for i in ids) and not all(i.startswith("prune-") for i in ids)
    for compaction_id in ids:
        for scope in ([], [session_id]):
            code, document = run_json("--store", url, "audit", *scope, "--request", compaction_id)
            assert code == 0, (compaction_id, document)
            assert document["compaction_id"] == compaction_id
            assert document["session_id"] == session_id
            if compaction_id.startswith("prune-"):
                assert document["request"] is None and document["shape"] == "none"
                assert f"compact/prune seq {compaction_id.removeprefix('prune-')}" in document["notes"][0]
            else:
                assert document["request"]["messages"]


def test_audit_request_stdout_is_the_request_alone(compacted: tuple[str, str]) -> None:
    url, session_id = compacted
    for compaction_id in listed_ids(url, session_id):
        _, document = run_json("--store", url, "audit", "--request", compaction_id)
        code, out, err = run_human("--store", url, "audit", "--request", compaction_id)
        assert code == 0, err
        assert json.loads(out) == document["request"]
        assert f"compaction {compaction_id} of session {session_id}" in err
        assert all(note in err.replace("\n", " ") for note in document["notes"][:1])


@pytest.mark.parametrize("columns", [None, "80", "60"])
def test_the_audit_table_prints_every_id_and_seq_whole(
    compacted: tuple[str, str], columns: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, session_id = compacted
    if columns is not None:
        monkeypatch.setenv("COLUMNS", columns)
    _, document = run_json("--store", url, "audit", session_id)
    code, out, err = run_human("--store", url, "audit", session_id)
    assert code == 0, err
    assert "…" not in out
    for compaction in document["sessions"][0]["compactions"]:
        assert compaction["compaction_id"] in out.split()
        last = compaction["end_seq"] if compaction["end_seq"] is not None else compaction["replacement_seq"]
        assert f"{compaction['start_seq']}..{last}" in out.split()
    if columns is not None:
        table_lines = out.split("\n  + ")[0]  # the completion notes after the table are prose
        assert wide_lines(table_lines, int(columns)) == []


def test_audit_html_note_goes_to_stderr(compacted: tuple[str, str], tmp_path: Path) -> None:
    url, session_id = compacted
    report = tmp_path / "report.html"
    code, out, err = run_human("--store", url, "audit", session_id, "--html", str(report))
    assert code == 0 and report.is_file()
    assert f"HTML report written to {report}" in err and "HTML report" not in out
    assert "audit passed" in out


# ---------------------------------------------------------------- sessions


def test_sessions_on_an_empty_store_prints_nothing_on_stdout() -> None:
    code, out, err = run_human("--store", "memory://", "sessions")
    assert (code, out) == (0, "")
    assert "no sessions in this store" in err


def test_sessions_table_fits_80_columns_with_whole_ids(
    compacted: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, session_id = compacted
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run_human("--store", url, "sessions")
    assert code == 0, err
    assert session_id in out.split() and "…" not in out
    assert wide_lines(out, 80) == []
    assert err == ""


# ---------------------------------------------------------------- import


def skip_groups(skipped: list[str]) -> Counter[str]:
    return Counter(entry.partition(": ")[2] for entry in skipped)


def test_import_at_80_columns_keeps_every_header_and_value_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    from compaction.cli.cmd_import import HEADERS

    _, document = run_json("--store", "memory://", "import", str(CLAUDE_SAMPLE), str(PI_SESSION))
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run_human("--store", "memory://", "import", str(CLAUDE_SAMPLE), str(PI_SESSION))
    assert code == 0, err
    report = out.split(" input lines of session ")[0].rsplit("\n", 1)[0]  # the table part
    assert wide_lines(report, 80) == [] and "…" not in out
    words = out.split()
    for header in HEADERS:
        assert header in out, header
    for row in document["sessions"]:
        assert row["session_id"] in words and Path(row["source"]).name in words
        assert str(row["events"]) in words and row["format"] in words


def test_import_groups_the_skipped_reasons_with_counts() -> None:
    _, document = run_json("--store", "memory://", "import", str(CLAUDE_SAMPLE))
    (row,) = document["sessions"]
    groups = skip_groups(row["skipped"])
    assert len(groups) >= 2 and sum(groups.values()) == len(row["skipped"])
    code, out, err = run_human("--store", "memory://", "import", str(CLAUDE_SAMPLE))
    assert code == 0, err
    assert f"{len(row['skipped'])} input lines of session {row['session_id']}" in out
    lines = [" ".join(line.split()) for line in out.splitlines()]
    for reason, count in groups.items():
        assert any(line.startswith(f"{count} {reason} (first: ") for line in lines), reason


def test_import_notes_go_to_stderr() -> None:
    _, document = run_json("--store", "memory://", "import", str(PI_SESSION))
    notes = [note for row in document["sessions"] for note in row["notes"]]
    assert notes
    code, out, err = run_human("--store", "memory://", "import", str(PI_SESSION))
    assert code == 0, err
    flat = " ".join(err.split())
    assert all(" ".join(note.split()) in flat for note in notes)
    assert notes[0] not in out and " note: " not in out


# ---------------------------------------------------------------- copy


def test_copy_prints_its_table_on_stdout_and_progress_on_stderr(
    compacted: tuple[str, str], tmp_path: Path
) -> None:
    url, session_id = compacted
    target = f"sqlite:///{tmp_path / 'copy.db'}"
    code, out, err = run_human("--store", url, "copy", "--to", target, "--all")
    assert code == 0, err
    assert f"[1/1] {session_id}: copied" in err and "[1/1]" not in out
    assert "1 verified" in out
    assert session_id in out.split()  # whole, as every table prints an id


# ---------------------------------------------------------------- recover


def test_recover_table_prints_whole_ids(sqlite_url: str) -> None:
    from tests.recovery.test_recovery import dead_pid, lease, saved_session

    with SessionStore.open(sqlite_url) as store:
        session = saved_session(store, lease(dead_pid()))
    _, document = run_json("--store", sqlite_url, "recover")
    (orphan,) = document["orphans"]
    code, out, err = run_human("--store", sqlite_url, "recover")
    assert code == 0, err
    words = out.split()
    assert str(session.id) in words and orphan["compaction_id"] in words and "…" not in out
    assert orphan["surface_hash"] in words


# ---------------------------------------------------------------- demo


def test_demo_on_memory_says_the_store_is_gone() -> None:
    code, out, err = run_human("--store", "memory://", "demo", "--turns", "1", "--steps", "3")
    assert code == 0, err
    assert "what it means" in out and "checkpoint strategy" in out and "summary strategy" in out
    flat = " ".join(err.split())
    assert "3 sessions in memory://" in flat and "they are gone now" in flat
    assert "compaction --store sqlite:///demo.db demo" in err
    assert " audit " not in flat.replace("audit --all", "")  # no session left to audit


def test_demo_closing_lines_are_true_on_a_persistent_store(sqlite_url: str) -> None:
    code, _, err = run_human("--store", sqlite_url, "demo", "--turns", "1", "--steps", "3")
    assert code == 0, err
    _, listing = run_json("--store", sqlite_url, "sessions")
    stored = [row["session_id"] for row in listing["sessions"]]
    assert len(stored) == 3
    assert f"The demo stored 3 sessions in {sqlite_url}:" in err
    for session_id in stored:
        assert session_id in err
    commands = [
        shlex.split(line.strip(), comments=True)
        for line in err.splitlines()
        if line.strip().startswith("compaction ")
    ]
    assert {c[3] for c in commands} == {"audit", "show", "sessions"}
    for command in commands:
        argv = command[1:]  # the explanation after it is a shell comment
        assert argv[:2] == ["--store", sqlite_url]  # not the default store: the URL is repeated
        code, document = run_json(*argv)
        assert code == 0, (argv, document)


# ---------------------------------------------------------------- --help


def test_help_states_the_output_rule_and_the_exit_statuses() -> None:
    code, out, _ = run_human("--help")
    assert code == 0
    flat = " ".join(out.split())
    assert "stdout holds the result and nothing else" in flat
    assert "go to stderr" in flat
    for status in ("0 success", "1 an error from the library", "2 a command line that does not parse",
                   "130 interrupted"):  # fmt: skip
        assert status in flat, status


# ---------------------------------------------------------------- tables


@pytest.mark.parametrize("width", [40, 80, 200])
def test_a_table_never_cuts_a_value(width: int) -> None:
    values = [
        ["3034fd1e-e133-5509-be14-61887ff5620f", "9e953218-585f-4692-89df-9e0747a31c68.jsonl", 2389],
        ["prune-119", "a file name with spaces that can wrap between its words", 7],
    ]
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(table("title", ("session id", "source", "synthesized results"), values))
    text = console.export_text()
    assert "…" not in text and wide_lines(text, width) == []
    joined = "".join(text.split())  # at 40 columns a value longer than the room left wraps
    for row in values:
        for value in row:
            assert "".join(str(value).split()) in joined
    if width >= 80:  # room for every word: each id and file name is printed whole, on one line
        words = text.split()
        assert values[0][0] in words and values[0][1] in words and "prune-119" in words
        assert "synthesized" in words


# ---------------------------------------------------------------- streaming


PEAK = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
assert done.returncode == 0, done.stderr.decode()
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
"""


def peak_rss(*argv: str) -> int:
    """The peak resident set of one ``compaction`` process, in bytes (a fresh parent measures only it)."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PEAK), str(ENTRY_POINT), *argv],
        capture_output=True, text=True, timeout=300, check=True, cwd=ROOT,
    )  # fmt: skip
    return int(done.stdout)


@pytest.fixture(scope="module")
def huge(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str, int]:
    """One session with a 20 MB user message and one with a tiny one, in a SQLite store."""
    size = 20_000_000
    url = f"sqlite:///{tmp_path_factory.mktemp('huge') / 'sessions.db'}"
    with SessionStore.open(url) as store:
        ids = []
        for text in ("x" * size, "x"):
            session = store.create()
            turn(session, text, steps=0)
            store.save(session)
            ids.append(str(session.id))
    return url, ids[0], ids[1], size


@pytest.mark.parametrize(
    "argv", [["--format", "text"], ["--format", "openai"], ["--format", "openai", "--json"]]
)
def test_show_streams_a_huge_message(huge: tuple[str, str, str, int], argv: list[str]) -> None:
    """Measured with a 50 MB message (peak RSS; loading the session alone peaks at 147 MB): before,
    ``--format text`` ran for minutes past 370 MB (rich laid the text out) and ``--format openai``
    peaked at 342 MB (the JSON pretty-printed whole); streamed, both peak at 147 MB. The bound
    here is generous: under 4 times the message above the same command on a tiny session."""
    url, big, small, size = huge
    baseline = peak_rss("--store", url, "show", small, *argv)
    peak = peak_rss("--store", url, "show", big, *argv)
    assert peak - baseline < 4 * size, f"show {argv}: peak {peak >> 20} MiB, baseline {baseline >> 20} MiB"


def test_show_into_a_closed_pipe_exits_quietly(huge: tuple[str, str, str, int]) -> None:
    """``show X --format openai | head -c 100``: the reader leaves early; no traceback, exit 0."""
    url, big, _, _ = huge
    with subprocess.Popen(
        [str(ENTRY_POINT), "--store", url, "show", big, "--format", "openai"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    ) as reader:  # fmt: skip
        assert reader.stdout is not None and reader.stderr is not None
        assert reader.stdout.read(100).startswith(b"[")
        reader.stdout.close()
        err = reader.stderr.read().decode()
        assert reader.wait(timeout=120) == 0, err
    assert "Traceback" not in err and "Exception ignored" not in err
