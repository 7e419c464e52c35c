"""``compaction import`` on what users actually point it at: older OpenHands output, pi bash executions,
Claude Code queued messages, forced formats, counts that agree across formats, directories, FIFOs, byte
order marks, deep JSON, empty sessions and concurrent imports of one file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from compaction.cli.cmd_import import _save_first, save_imported
from compaction.errors import TranscriptError
from compaction.importers import detect_format, import_path, registry
from compaction.sessions.blocks import ToolResultBlock, text_of
from compaction.sessions.events import (
    AssistantMessage,
    SessionInvariants,
    SteeringMessage,
    ToolCall,
    ToolResult,
    TurnEnd,
    UserMessage,
)
from compaction.sessions.store import SessionStore
from tests.builders import Doc, run_human, run_json
from tests.conftest import PUBLIC_TRANSCRIPTS, TRANSCRIPTS

DATA = Path(__file__).resolve().parents[2] / "sessions" / "data"
LEGACY_OPENHANDS = DATA / "openhands_legacy_output.jsonl"
SPOTTER = TRANSCRIPTS / "spotter/258c7280-ae70-4798-800f-63464d01a85d.jsonl"
PI = TRANSCRIPTS / "pi-mono/large-session.jsonl"
SWE_AGENT = TRANSCRIPTS / "swe-agent/6e44b9__sweagenttestrepo-1c2844.traj"
ENTRY_POINT = Path(sys.executable).parent / "compaction"


def _write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _import(url: str, *argv: str) -> tuple[int, Doc]:
    return run_json("--store", url, "import", *argv)


# ---------------------------------------------------------------- 14.4 the older OpenHands output


def test_the_older_openhands_output_imports_with_actions_paired_to_observations() -> None:
    first, second = import_path(LEGACY_OPENHANDS)
    events = list(first.session.events())
    task = events[0]
    assert isinstance(task, UserMessage) and "installation section" in text_of(task.message.content)
    assert first.tool_calls == 4 and first.tool_results == 3 and first.synthesized_results == 1
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [c.name for c in calls] == ["run", "run_ipython", "run", "run"]
    assert json.loads(calls[0].arguments) == {"command": "cat README.md"}
    results = {e.message.source.call_id: e for e in events if isinstance(e, ToolResult)}
    cat = results[calls[0].call_id].message.content[0]
    assert isinstance(cat, ToolResultBlock) and "# notes-app" in text_of(cat.content)
    assert results[calls[2].call_id].synthesized  # `npm test` never got its observation
    assistants = [e for e in events if isinstance(e, AssistantMessage)]
    assert text_of(assistants[0].message.content) == "Let me look at the README first."
    assert "task is complete" in text_of(assistants[-1].message.content)  # the finish action
    assert len(second.session) > 0 and second.tool_results == 1
    *_, last_turn_end, marker = second.session.events()  # the import's marker comes last
    assert isinstance(marker, SessionInvariants) and isinstance(last_turn_end, TurnEnd)
    assert last_turn_end.reason.kind == "error"
    assert first.session.surface.is_balanced() and second.session.surface.is_balanced()
    assert "line 1: instance example/notes-app#3" in first.notes


PAIRS_RUN = {
    "instance_id": "example__notes-5",
    "instruction": "Fix the crash on an empty notes file.",
    "metadata": {"agent_class": "CodeActAgent", "llm_config": {"model": "anthropic/claude-3-5-sonnet"}},
    "history": [
        [
            {"id": 0, "timestamp": "2024-08-01T10:00:00", "source": "user",
             "message": "Fix the crash on an empty notes file.", "action": "message",
             "args": {"content": "Fix the crash on an empty notes file.", "images_urls": None,
                      "wait_for_response": False}},
            {"message": "No observation", "observation": "null", "content": "", "extras": {}},
        ],
        [
            {"id": 3, "timestamp": "2024-08-01T10:00:05", "source": "agent",
             "message": "Running command: node src/index.js empty.txt", "action": "run",
             "args": {"command": "node src/index.js empty.txt", "thought": "Reproduce it first.",
                      "keep_prompt": True, "is_confirmed": "confirmed"}},
            {"id": 4, "timestamp": "2024-08-01T10:00:06", "source": "agent", "cause": 3,
             "message": "Command `node src/index.js empty.txt` executed with exit code 1.",
             "observation": "run", "content": "TypeError: Cannot read properties of undefined",
             "extras": {"command_id": -1, "command": "node src/index.js empty.txt", "exit_code": 1}},
        ],
        [
            {"id": 5, "timestamp": "2024-08-01T10:00:09", "source": "agent", "message": "done",
             "action": "finish", "args": {"outputs": {}, "thought": "Fixed the split on empty input."}},
            {"message": "No observation", "observation": "null", "content": "", "extras": {}},
        ],
    ],
    "error": None,
}  # fmt: skip


def test_older_openhands_evaluation_pairs_import_too(tmp_path: Path) -> None:
    """Evaluation output of that era: ``history`` is a list of ``[action, observation]`` pairs of
    ``event_to_dict`` dicts (with ``source`` and ``args``, without ``tool_call_metadata``)."""
    path = _write_jsonl(tmp_path / "output.jsonl", [PAIRS_RUN])
    (result,) = import_path(path)
    events = list(result.session.events())
    assert isinstance(events[0], UserMessage)
    assert text_of(events[0].message.content) == "Fix the crash on an empty notes file."
    (call,) = [e for e in events if isinstance(e, ToolCall)]
    assert call.name == "run" and json.loads(call.arguments) == {"command": "node src/index.js empty.txt"}
    (answer,) = [e for e in events if isinstance(e, ToolResult)]
    block = answer.message.content[0]
    assert isinstance(block, ToolResultBlock) and "TypeError" in text_of(block.content)
    assistants = [e for e in events if isinstance(e, AssistantMessage)]
    assert [text_of(a.message.content) for a in assistants] == [
        "Reproduce it first.",
        "Fixed the split on empty input.",
    ]
    assert assistants[0].message.source.model == "anthropic/claude-3-5-sonnet"
    assert result.synthesized_results == 0 and sum("null observation" in s for s in result.skipped) == 2


def test_the_older_openhands_output_is_listed_and_shown(sqlite_url: str) -> None:
    code, document = _import(sqlite_url, str(LEGACY_OPENHANDS))
    assert code == 0
    rows = document["sessions"]
    assert [r["status"] for r in rows] == ["imported", "imported"]
    assert all(r["events"] > 0 and r["format"] == "openhands" for r in rows)
    code, listed = run_json("--store", sqlite_url, "sessions")
    assert code == 0 and {s["session_id"] for s in listed["sessions"]} >= {r["session_id"] for r in rows}
    code, shown = run_json("--store", sqlite_url, "show", rows[0]["session_id"])
    assert code == 0 and shown["messages"]


# ---------------------------------------------------------------- 14.4 / 15.8 sessions with no events


def test_sessions_without_events_are_skipped_with_the_reason(sqlite_url: str, tmp_path: Path) -> None:
    only_result = _write_jsonl(
        tmp_path / "only-result.jsonl",
        [{"type": "user", "uuid": "u1", "sessionId": "s", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]}}],
    )  # fmt: skip
    sidechain = _write_jsonl(
        tmp_path / "sidechain.jsonl",
        [{"type": "progress", "uuid": "p1", "sessionId": "s", "isSidechain": True, "data": {}}],
    )
    for path in (only_result, sidechain):
        code, document = _import(sqlite_url, str(path))
        assert code == 0, document
        (row,) = document["sessions"]
        assert row["status"] == "skipped" and row["events"] == 0
        assert row["reason"].startswith("no events to import: line 1")
        code, listed = run_json("--store", sqlite_url, "sessions")
        assert row["session_id"] not in {s["session_id"] for s in listed["sessions"]}
    code, out, _ = run_human("--store", sqlite_url, "import", str(only_result))
    assert code == 0 and "0 imported, 0 already imported, 1 skipped (no events)" in out
    assert "tool result for 'toolu_1' not imported" in out


# ---------------------------------------------------------------- 14.5 pi bash executions


def _pi_file(tmp_path: Path, *bash: dict[str, Any]) -> Path:
    header = {"type": "session", "id": "s1", "timestamp": "2025-01-01T00:00:00Z", "cwd": "/w"}
    prompt = {"type": "message", "message": {"role": "user", "content": "look around"}}
    entries = [{"type": "message", "message": {"role": "bashExecution", **b}} for b in bash]
    return _write_jsonl(tmp_path / "pi.jsonl", [header, prompt, *entries])


def test_pi_bash_executions_are_user_text_as_pi_sends_them(tmp_path: Path) -> None:
    path = _pi_file(
        tmp_path,
        {"command": "ls", "output": "a.py\nb.py", "exitCode": 0, "cancelled": False, "truncated": False},
        {"command": "make", "output": "", "exitCode": 2, "cancelled": False, "truncated": True,
         "fullOutputPath": "/tmp/out.log"},
        {"command": "sleep 9", "output": "", "exitCode": None, "cancelled": True, "truncated": False},
        {"command": "secret", "output": "x", "exitCode": 0, "cancelled": False, "truncated": False,
         "excludeFromContext": True},
    )  # fmt: skip
    (result,) = import_path(path)
    texts = [text_of(e.message.content) for e in result.session.events() if isinstance(e, UserMessage)]
    assert texts == [
        "look around",
        "Ran `ls`\n```\na.py\nb.py\n```",
        "Ran `make`\n(no output)\n\nCommand exited with code 2\n\n"
        "[Output truncated. Full output: /tmp/out.log]",
        "Ran `sleep 9`\n(no output)\n\n(command cancelled)",
    ]
    assert any("excludeFromContext" in s for s in result.skipped)


# ---------------------------------------------------------------- 14.6 Claude Code queued messages


def test_claude_code_queued_messages_reach_the_log() -> None:
    (result,) = import_path(SPOTTER)
    events = list(result.session.events())
    texts = {text_of(e.message.content): e for e in events if isinstance(e, (UserMessage, SteeringMessage))}
    assert "check again" in texts
    steering = texts["new beads for the epic were added. tackle them"]
    assert isinstance(steering, SteeringMessage) and "queued" in (steering.origin or "")
    assert steering.seq in result.session.surface_at(steering.seq)  # the model saw it
    # task notifications queued and later delivered as user lines are imported once, there
    notifications = [t for t in texts if t.startswith("<task-notification>\n<task-id>b0be39e")]
    assert len(notifications) == 1
    assert any("delivered as the user line 496" in s for s in result.skipped)


# ---------------------------------------------------------------- 14.7 a forced format that matches nothing


def test_a_forced_format_that_matches_nothing_names_the_detected_one(sqlite_url: str) -> None:
    with pytest.raises(TranscriptError, match=r"--format pi matches nothing.*looks like 'claude-code'"):
        import_path(SPOTTER, "pi")
    code, document = _import(sqlite_url, str(SPOTTER), "--format", "pi")
    assert code == 1 and document["error"]["type"] == "TranscriptError"
    assert "try --format claude-code" in document["error"]["message"]


def test_a_forced_format_that_finds_none_of_its_records_names_the_detected_one(sqlite_url: str) -> None:
    """OpenHands forced on a SWE-agent trajectory found actions in its messages and invented tool
    calls for them (0 results, 4 synthesized, exit 0): none of the file is OpenHands output."""
    with pytest.raises(
        TranscriptError,
        match=r"--format openhands matches nothing in this file: none of it is OpenHands output",
    ):
        import_path(SWE_AGENT, "openhands")
    code, document = _import(sqlite_url, str(SWE_AGENT), "--format", "openhands")
    assert code == 1 and document["error"]["type"] == "TranscriptError"
    message = document["error"]["message"]
    assert "looks like 'openai'" in message and "try --format openai" in message
    with SessionStore.open(sqlite_url) as store:
        assert not list(store.session_ids())


@pytest.mark.parametrize("path", PUBLIC_TRANSCRIPTS, ids=lambda p: p.parent.name)
def test_every_format_forced_on_another_formats_file_is_refused(path: Path) -> None:
    """Forcing a format is for a file auto-detection gets wrong; forced on a file of another format
    (that it does not recognise at all), every format refuses it and names the detected one."""
    detected = detect_format(path)
    for name in set(registry.names()) - {detected}:
        with pytest.raises(
            TranscriptError, match=rf"--format {name} matches nothing.*looks like {detected!r}"
        ):
            import_path(path, name)


# ---------------------------------------------------------------- 14.8 counts agree across formats


def test_pi_counts_are_the_same_imported_from_pi_and_from_its_native_export(
    sqlite_url: str, tmp_path: Path
) -> None:
    code, document = _import(sqlite_url, str(PI))
    assert code == 0
    (from_pi,) = document["sessions"]
    assert from_pi["synthesized_results"] > 0
    export = tmp_path / "pi.events.jsonl"
    assert run_json("--store", sqlite_url, "export", from_pi["session_id"], "--out", str(export))[0] == 0
    other = f"sqlite:///{tmp_path / 'other.db'}"
    code, document = _import(other, str(export))
    assert code == 0
    (from_native,) = document["sessions"]
    keys = ("events", "tool_calls", "tool_results", "synthesized_results")
    assert {k: from_native[k] for k in keys} == {k: from_pi[k] for k in keys}
    assert from_pi["tool_calls"] == from_pi["tool_results"] + from_pi["synthesized_results"]


# ---------------------------------------------------------------- 14.9 system prompt and format names


def test_show_prints_the_system_prompt_of_the_request_header(sqlite_url: str) -> None:
    (imported,) = import_path(SWE_AGENT)
    header = imported.session.latest_header()
    assert header is not None and header.system
    code, document = _import(sqlite_url, str(SWE_AGENT))
    session_id = document["sessions"][0]["session_id"]
    code, shown = run_json("--store", sqlite_url, "show", session_id)
    assert code == 0 and shown["system"] == header.system
    code, out, _ = run_human("--store", sqlite_url, "show", session_id)
    assert code == 0 and header.system.splitlines()[0] in out
    assert out.index("system prompt") < out.index(header.system.splitlines()[0])


@pytest.mark.parametrize("name", ["swe-agent", "mini-swe-agent"])
def test_swe_agent_format_names_are_accepted(sqlite_url: str, name: str) -> None:
    code, document = _import(sqlite_url, str(SWE_AGENT), "--format", name)
    assert code == 0, document
    (row,) = document["sessions"]
    assert row["format"] == "openai" and row["events"] > 0


# ---------------------------------------------------------------- 14.12 directories


def test_a_directory_imports_every_transcript_under_it(sqlite_url: str, tmp_path: Path) -> None:
    tree = tmp_path / "runs"
    (tree / "deep" / "deeper").mkdir(parents=True)
    (tree / "deep" / "deeper" / "legacy.jsonl").write_bytes(LEGACY_OPENHANDS.read_bytes())
    (tree / "deep" / "pi.jsonl").write_bytes(PI.read_bytes())
    (tree / "swe.traj").write_bytes(SWE_AGENT.read_bytes())
    (tree / "README.md").write_text("not a transcript")
    code, document = _import(sqlite_url, str(tree))
    assert code == 0, document
    sources = Counter(Path(r["source"].split("#")[0]).name for r in document["sessions"])
    assert sources == {"legacy.jsonl": 2, "pi.jsonl": 1, "swe.traj": 1}
    assert {r["status"] for r in document["sessions"]} == {"imported"}
    empty = tmp_path / "empty"
    empty.mkdir()
    code, document = _import(sqlite_url, str(empty))
    assert code == 1 and "is a directory with no transcript files" in document["error"]["message"]


def test_the_progress_bar_goes_to_a_terminal_only(sqlite_url: str, tmp_path: Path) -> None:
    code, out, err = run_human("--store", sqlite_url, "import", str(LEGACY_OPENHANDS))
    assert code == 0 and "importing transcripts" not in out + err  # not a terminal: no bar


# ---------------------------------------------------------------- 15.10 FIFOs, BOMs; 15.5 deep JSON


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_is_reported_as_what_it_is(sqlite_url: str, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    code, document = _import(sqlite_url, str(fifo))
    assert code == 1
    assert "is a FIFO (named pipe), not a regular file" in document["error"]["message"]
    code, document = _import(sqlite_url, str(tmp_path / "missing.jsonl"))
    assert code == 1 and "no such file or directory" in document["error"]["message"]


def test_a_byte_order_mark_is_accepted(sqlite_url: str, tmp_path: Path) -> None:
    plain = PI.read_bytes()
    with_bom = tmp_path / "bom.jsonl"
    with_bom.write_bytes(b"\xef\xbb\xbf" + plain)
    code, document = _import(sqlite_url, str(with_bom))
    assert code == 0, document
    (row,) = document["sessions"]
    assert row["status"] == "imported" and row["events"] > 0
    export = tmp_path / "export.jsonl"
    assert run_json("--store", sqlite_url, "export", row["session_id"], "--out", str(export))[0] == 0
    native_bom = tmp_path / "native-bom.jsonl"
    native_bom.write_bytes(b"\xef\xbb\xbf" + export.read_bytes())
    code, document = _import(f"sqlite:///{tmp_path / 'other.db'}", str(native_bom))
    assert code == 0, document
    assert document["sessions"][0]["format"] == "events"


@pytest.mark.parametrize("deep", ["[" * 1100 + "]" * 1100, '{"a":' * 1100 + "1" + "}" * 1100])
def test_deep_json_is_a_transcript_error_naming_the_line(sqlite_url: str, tmp_path: Path, deep: str) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_text(json.dumps({"type": "session", "id": "s"}) + "\n" + deep + "\n")
    for argv in ((), ("--format", "pi"), ("--format", "events")):
        code, document = _import(sqlite_url, str(path), *argv)
        assert code == 1, (argv, document)
        assert document["error"]["type"] == "TranscriptError"
        assert f"{path}:" in document["error"]["message"]
        assert "nested too deeply" in document["error"]["message"] or argv == ("--format", "events")
    first = tmp_path / "deep-first.jsonl"
    first.write_text(deep + "\n")
    code, document = _import(sqlite_url, str(first))
    assert code == 1 and f"{first}:1: " in document["error"]["message"]
    assert "nested too deeply" in document["error"]["message"]


# ---------------------------------------------------------------- 15.9 concurrent imports


def test_a_session_saved_meanwhile_by_another_import_is_already_imported(sqlite_url: str) -> None:
    """The race's losing side, made deterministic: the session was not stored when this import
    looked, and is when it saves (another process saved it in between)."""
    first, _ = import_path(LEGACY_OPENHANDS)
    again, _ = import_path(LEGACY_OPENHANDS)
    with SessionStore.open(sqlite_url) as store, SessionStore.open(sqlite_url) as other:
        assert not store.exists(first.session.id)
        other.save(again.session)  # the winner
        assert _save_first(store, first.session) is False
        assert save_imported(store, first)["status"] == "already_imported"
        assert len(store.get(first.session.id)) == len(first.session)


def test_concurrent_imports_of_one_file_all_succeed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'race.db'}"
    with SessionStore.open(url):
        pass  # create the store once, before the racers start
    many = tmp_path / "many.jsonl"
    runs = [json.loads(line) for line in LEGACY_OPENHANDS.read_text().splitlines()]
    copies = [{**run, "instance_id": f"copy-{k}"} for k in range(10) for run in runs]  # a repeat is skipped
    many.write_text("".join(json.dumps(run) + "\n" for run in copies))  # 20 sessions
    command = [str(ENTRY_POINT), "--store", url, "import", str(many), "--json"]
    processes = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)
    ]
    outputs = [p.communicate(timeout=300) for p in processes]
    for process, (out, err) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, err + out
    rows = [row for out, _ in outputs for row in json.loads(out)["sessions"]]
    statuses = Counter((r["session_id"], r["status"]) for r in rows)
    ids = {r["session_id"] for r in rows}
    assert len(ids) == 20
    for session_id in ids:
        assert statuses[(session_id, "imported")] == 1
        assert statuses[(session_id, "already_imported")] == 3
