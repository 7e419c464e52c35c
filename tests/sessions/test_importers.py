"""Transcript importers against the real public transcripts, plus small hand-written edge cases.

The counts of tool calls and results are checked against a deliberately naive counter written
here per format (read the raw file, count the blocks), never against the importer's own code.
"""

from __future__ import annotations

import json
from collections import Counter
from functools import cache
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from compaction.errors import ConfigurationError, TranscriptError
from compaction.importers import ImportedSession, TranscriptFormat, detect_format, import_path, registry
from compaction.sessions import render
from compaction.sessions.events import ContextMessage, SessionEvent, ToolCall, ToolResult, UserMessage
from compaction.sessions.interrupted import NOT_STARTED_TEXT, OUTCOME_UNKNOWN_TEXT
from compaction.sessions.store import SessionStore
from tests.conftest import PUBLIC_TRANSCRIPTS, ROOT, TRANSCRIPTS

FORMAT_BY_DIRECTORY = {
    "spotter": "claude-code",
    "claude-code-log": "claude-code",
    "pi-mono": "pi",
    "openhands": "openhands",
    "swe-agent": "openai",
    "mini-swe-agent": "openai",
}
SUBAGENT = TRANSCRIPTS / "spotter/258c7280-ae70-4798-800f-63464d01a85d/subagents/agent-acompact-fffbd0.jsonl"


def _id(path: Path) -> str:
    return str(path.relative_to(TRANSCRIPTS))


def expected_format(path: Path) -> str:
    return FORMAT_BY_DIRECTORY[path.relative_to(TRANSCRIPTS).parts[0]]


@cache
def imported(path: Path) -> tuple[ImportedSession, ...]:
    return tuple(import_path(path))


def events(result: ImportedSession) -> list[SessionEvent]:
    return list(result.session.events())


# ---------------------------------------------------------------- independent counters


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def count_claude_code(path: Path) -> tuple[int, int]:
    calls: set[str] = set()
    results = 0
    for line in _jsonl(path):
        content = (line.get("message") or {}).get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            if block.get("type") == "tool_use":
                calls.add(block["id"])
            elif block.get("type") == "tool_result":
                results += 1
    return len(calls), results


def count_pi(path: Path) -> tuple[int, int]:
    calls = results = 0
    for line in _jsonl(path):
        message = line.get("message") or {}
        if message.get("role") == "assistant":
            calls += sum(1 for b in message["content"] if b.get("type") == "toolCall")
        elif message.get("role") == "toolResult":
            results += 1
    return calls, results


def count_openhands(path: Path) -> tuple[int, int]:
    calls = results = 0
    for run in _jsonl(path):
        for event in run["history"]:
            if event.get("tool_call_metadata"):
                if "observation" in event:
                    results += 1
                else:
                    calls += 1
    return calls, results


def count_openai(path: Path) -> tuple[int, int]:
    document = json.loads(path.read_text())
    messages = document if isinstance(document, list) else document["history"]
    calls = results = 0
    for message in messages:
        calls += len(message.get("tool_calls") or [])
        if message.get("role") == "tool":
            results += len(message.get("tool_call_ids") or [message.get("tool_call_id")])
    return calls, results


def count_codex(path: Path) -> tuple[int, int]:
    """Codex rollouts (tests/sessions/test_codex_import.py imports the ones in tests/data/codex)."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    items = [line["payload"] for line in lines if line["type"] == "response_item"]
    kinds = Counter(item.get("type") for item in items)
    calls = kinds["function_call"] + kinds["local_shell_call"] + kinds["custom_tool_call"]
    return calls, kinds["function_call_output"] + kinds["custom_tool_call_output"]


COUNTERS = {
    "claude-code": count_claude_code,
    "pi": count_pi,
    "openhands": count_openhands,
    "openai": count_openai,
    "codex": count_codex,
}


# ---------------------------------------------------------------- every public transcript


@pytest.mark.parametrize("path", PUBLIC_TRANSCRIPTS, ids=_id)
def test_detects_the_format(path: Path) -> None:
    assert detect_format(path) == expected_format(path)
    assert all(r.format == expected_format(path) for r in imported(path))


@pytest.mark.parametrize("path", [p for p in PUBLIC_TRANSCRIPTS if expected_format(p) in COUNTERS], ids=_id)
def test_counts_match_an_independent_count(path: Path) -> None:
    results = imported(path)
    calls, answers = COUNTERS[expected_format(path)](path)
    assert sum(r.tool_calls for r in results) == calls
    assert sum(r.tool_results for r in results) == answers
    for result in results:
        assert result.tool_calls == result.tool_results + result.synthesized_results
        by_type = Counter(e.type for e in events(result))
        assert by_type["tool/result"] == result.tool_results + result.synthesized_results
        assert result.events == len(result.session)


@pytest.mark.parametrize("path", PUBLIC_TRANSCRIPTS, ids=_id)
def test_surface_is_well_formed(path: Path) -> None:
    for result in imported(path):
        session = result.session
        assert session.surface.is_balanced()
        assert render.pairing_problems(session.derive_messages()) == []
        assert session.open_turn is None and session.open_step is None
        assert [e.seq for e in events(result) if not e.origin] == []
        assert session.first_user_seq is not None
        assert session.type_counts.get("request/header", 0) >= 1


@pytest.mark.parametrize("path", PUBLIC_TRANSCRIPTS, ids=_id)
def test_saves_and_reloads_the_same_session(path: Path) -> None:
    with SessionStore.open("memory://") as store:
        for result in import_path(path):
            store.save(result.session)
            loaded = store.get(result.session.id)
            assert loaded.nodes == result.session.nodes
            assert len(loaded) == result.events
            assert loaded.derive_messages() == result.session.derive_messages()


@pytest.mark.parametrize("path", PUBLIC_TRANSCRIPTS, ids=_id)
def test_importing_twice_gives_the_same_ids(path: Path) -> None:
    first = [r.session.id for r in imported(path)]
    again = [r.session.id for r in import_path(path, expected_format(path))]
    assert first == again
    assert len(set(first)) == len(first)


# ---------------------------------------------------------------- format specifics


def test_claude_code_merges_the_lines_of_one_api_message() -> None:
    for path in PUBLIC_TRANSCRIPTS:
        if expected_format(path) != "claude-code":
            continue
        api_messages = {line["message"]["id"] for line in _jsonl(path) if line.get("type") == "assistant"}
        (result,) = imported(path)
        assert Counter(e.type for e in events(result))["assistant/message"] == len(api_messages)


def test_claude_code_compaction_is_counted_and_its_summary_kept() -> None:
    path = TRANSCRIPTS / "spotter/258c7280-ae70-4798-800f-63464d01a85d.jsonl"
    boundaries = sum(1 for line in _jsonl(path) if line.get("subtype") == "compact_boundary")
    (result,) = imported(path)
    assert result.compactions == boundaries > 0
    summaries = [e for e in events(result) if isinstance(e, UserMessage) and "isCompactSummary" in e.origin]
    assert len(summaries) == 1
    assert "continued from a previous conversation" in summaries[0].message.content[0].text


def test_claude_code_reasoning_and_skipped_lines_are_reported() -> None:
    path = TRANSCRIPTS / "spotter/258c7280-ae70-4798-800f-63464d01a85d.jsonl"
    lines = _jsonl(path)
    progress = sum(1 for line in lines if line.get("type") == "progress")
    (result,) = imported(path)
    assert sum("progress line" in s for s in result.skipped) == progress
    thinking = sum(
        1
        for line in lines
        if line.get("type") == "assistant"
        for b in line["message"]["content"]
        if b["type"] == "thinking"
    )
    reasoning = sum(
        1
        for e in events(result)
        if e.type == "assistant/message"
        for b in e.message.content  # type: ignore[attr-defined]
        if b.__class__.__name__ == "ReasoningBlock"
    )
    assert reasoning == thinking > 0


def test_claude_code_subagent_file_imports_as_one_session() -> None:
    (result,) = import_path(SUBAGENT)
    assert result.source == str(SUBAGENT)
    assert any("sidechain" in n for n in result.notes)
    assert result.messages == len(_jsonl(SUBAGENT))
    assert render.pairing_problems(result.session.derive_messages()) == []


def test_pi_calls_without_results_are_synthesized_as_not_started() -> None:
    path = TRANSCRIPTS / "pi-mono/large-session.jsonl"
    lines = _jsonl(path)
    answered = {
        line["message"]["toolCallId"] for line in lines if line.get("message", {}).get("role") == "toolResult"
    }
    unanswered = {
        b["id"]
        for line in lines
        if line.get("message", {}).get("role") == "assistant"
        for b in line["message"]["content"]
        if b["type"] == "toolCall" and b["id"] not in answered
    }
    (result,) = imported(path)
    synthesized = [e for e in events(result) if isinstance(e, ToolResult) and e.synthesized]
    assert {e.message.source.call_id for e in synthesized} == unanswered
    assert result.synthesized_results == len(unanswered) > 0
    for event in synthesized:
        block = event.message.content[0]
        assert block.is_error  # type: ignore[union-attr]
        assert event.error is not None
        expected = NOT_STARTED_TEXT if event.error.code == "TOOL_NOT_STARTED" else OUTCOME_UNKNOWN_TEXT
        assert block.content[0].text == expected  # type: ignore[union-attr]


def test_pi_model_switches_become_header_changes() -> None:
    path = TRANSCRIPTS / "pi-mono/large-session.jsonl"
    models = [
        line["message"]["model"]
        for line in _jsonl(path)
        if line.get("message", {}).get("role") == "assistant"
    ]
    switches = sum(1 for a, b in pairwise(models) if a != b)
    (result,) = imported(path)
    headers = [e for e in events(result) if e.type == "request/header"]
    assert [h.reason for h in headers].count("change") == switches  # type: ignore[attr-defined]
    assert headers[0].model == models[0]  # type: ignore[attr-defined]


def test_openhands_runs_become_separate_sessions() -> None:
    path = TRANSCRIPTS / "openhands/multi_swe_bench/output.jsonl"
    runs = _jsonl(path)
    results = imported(path)
    assert [r.source for r in results] == [f"{path}#run-{k}" for k in range(1, len(runs) + 1)]
    for run, result in zip(runs, results, strict=True):
        loose_errors = sum(
            1 for e in run["history"] if e.get("observation") == "error" and not e.get("tool_call_metadata")
        )
        contexts = [e for e in events(result) if isinstance(e, ContextMessage)]
        assert len(contexts) == loose_errors
        header = next(e for e in events(result) if e.type == "request/header")
        assert header.system == run["history"][0]["args"]["content"]  # type: ignore[attr-defined]
        assert {t.name for t in header.tools} >= {"execute_bash", "finish"}  # type: ignore[attr-defined]
        last_end = [e for e in events(result) if e.type == "turn/end"][-1]
        assert (last_end.reason.kind == "error") == bool(run["error"])  # type: ignore[attr-defined]


def test_swe_agent_demonstration_does_not_displace_the_task_statement() -> None:
    path = TRANSCRIPTS / "swe-agent/pydicom__pydicom-1458.traj"
    history = json.loads(path.read_text())["history"]
    task = next(m for m in history if m["role"] == "user" and not m.get("is_demo"))
    (result,) = imported(path)
    session = result.session
    assert session.first_user_seq is not None
    first = session.event(session.first_user_seq)
    assert first.message.content[0].text == task["content"]  # type: ignore[attr-defined]
    steps = sum(1 for m in history if m["role"] == "assistant")
    assert session.type_counts["step/start"] == steps


def test_openai_model_comes_from_the_file_when_present() -> None:
    path = TRANSCRIPTS / "swe-agent/6e44b9__sweagenttestrepo-1c2844.traj"
    model = json.loads(path.read_text())["replay_config"]["agent"]["model"]["name"]
    (result,) = imported(path)
    header = next(e for e in events(result) if e.type == "request/header")
    assert header.model == model  # type: ignore[attr-defined]
    mini = TRANSCRIPTS / "mini-swe-agent/github_issue.traj.json"
    (result,) = imported(mini)
    header = next(e for e in events(result) if e.type == "request/header")
    assert header.model == "unknown"  # type: ignore[attr-defined]


# ---------------------------------------------------------------- hand-written edge cases


def _write(tmp_path: Path, name: str, records: list[Any]) -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _cc(kind: str, uid: str, content: Any, **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": kind, "content": content}
    if kind == "assistant":
        message |= {"id": extra.pop("mid"), "model": "claude-test"}
    return {"type": kind, "uuid": uid, "sessionId": "s", "message": message, **extra}


def test_claude_code_orphan_results_missing_results_and_sidechains(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "cc.jsonl",
        [
            _cc("user", "u1", "fix it"),
            _cc(
                "assistant",
                "a1",
                [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"c": 1}}],
                mid="m1",
            ),
            _cc(
                "assistant",
                "a2",
                [{"type": "tool_use", "id": "t2", "name": "Bash", "input": {}}],
                mid="m1",
            ),
            _cc("user", "r1", [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]),
            _cc("user", "r9", [{"type": "tool_result", "tool_use_id": "nope", "content": "?"}]),
            _cc("user", "s1", "side task", isSidechain=True, parentUuid=None),
            _cc(
                "assistant",
                "s2",
                [{"type": "text", "text": "done"}],
                mid="m9",
                isSidechain=True,
                parentUuid="s1",
            ),
            _cc("user", "u2", "thanks"),
        ],
    )
    main, side = import_path(path)
    assert (main.tool_calls, main.tool_results, main.synthesized_results) == (2, 1, 1)
    assert any("line 5" in s and "nope" in s for s in main.skipped)
    assert main.session.surface.is_balanced()
    assert render.pairing_problems(main.session.derive_messages()) == []
    assert side.source == f"{path}#sidechain-1" and side.messages == 2
    assert any("sidechain" in n for n in main.notes)
    calls = {e.call_id: e for e in events(main) if isinstance(e, ToolCall)}
    assert calls["t1"].arguments == '{"c":1}'
    synthesized = next(e for e in events(main) if isinstance(e, ToolResult) and e.synthesized)
    assert synthesized.error is not None and synthesized.error.name == "ToolOutcomeUnknownError"
    assert synthesized.source_event_seqs == (calls["t2"].seq,)


def test_pi_compaction_entry_is_counted_and_kept(tmp_path: Path) -> None:
    user = {"type": "message", "message": {"role": "user", "content": "go"}}
    path = _write(
        tmp_path,
        "pi.jsonl",
        [
            {"type": "session", "id": "x", "cwd": "/", "provider": "p", "modelId": "m"},
            user,
            {"type": "compaction", "summary": "so far", "firstKeptEntryIndex": 1},
            {
                "type": "message",
                "message": {"role": "assistant", "content": [], "provider": "p", "model": "m"},
            },
        ],
    )
    assert detect_format(path) == "pi"
    (result,) = import_path(path)
    assert result.compactions == 1
    assert any(isinstance(e, UserMessage) and "compaction" in (e.origin or "") for e in events(result))


def test_garbage_raises_naming_file_and_line(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text("this is not a transcript\n")
    with pytest.raises(TranscriptError) as caught:
        detect_format(garbage)
    assert caught.value.line == 1 and str(garbage) in str(caught.value)
    unknown = _write(tmp_path, "unknown.jsonl", [{"hello": "world"}])
    with pytest.raises(TranscriptError, match="unknown transcript format") as caught:
        import_path(unknown)
    assert caught.value.line == 1 and str(unknown) in str(caught.value)


def test_a_broken_line_inside_a_transcript_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    good = json.dumps(_cc("user", "u1", "hi"))
    path.write_text(f"{good}\n{{broken\n{good}\n")
    with pytest.raises(TranscriptError) as caught:
        import_path(path)
    assert caught.value.line == 2 and str(path) in str(caught.value)


def test_a_truncated_last_line_is_reported_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "truncated.jsonl"
    path.write_text(json.dumps(_cc("user", "u1", "hi")) + '\n{"type": "assis')
    (result,) = import_path(path, "claude-code")
    assert result.messages == 1
    assert any(s.startswith("line 2: truncated") for s in result.skipped)


def test_unknown_format_name_is_a_configuration_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "x.jsonl", [{"role": "user", "content": "hi"}])
    with pytest.raises(ConfigurationError, match="expected auto or one of"):
        import_path(path, "nonsense")


def _chat(task: str) -> list[dict[str, Any]]:
    call = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    return [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": task},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
        {"role": "tool", "tool_call_id": "c9", "content": "stray"},
        {"role": "assistant", "content": "done"},
    ]


def test_openai_jsonl_messages_and_conversations(tmp_path: Path) -> None:
    flat = _write(tmp_path, "flat.jsonl", _chat("list files"))
    assert detect_format(flat) == "openai"
    (result,) = import_path(flat)
    assert (result.tool_calls, result.tool_results, result.synthesized_results) == (1, 1, 0)
    assert any(s.startswith("line 5:") and "'c9'" in s for s in result.skipped)
    header = next(e for e in events(result) if e.type == "request/header")
    assert header.system == "be brief"  # type: ignore[attr-defined]
    runs = _write(tmp_path, "runs.jsonl", [{"messages": _chat("a")}, {"messages": _chat("b")}])
    first, second = import_path(runs)
    assert (first.source, second.source) == (f"{runs}#run-1", f"{runs}#run-2")
    assert first.session.id != second.session.id
    for imported_run in (first, second):
        assert render.pairing_problems(imported_run.session.derive_messages()) == []


def test_openai_developer_messages_are_system_messages(tmp_path: Path) -> None:
    # the first developer message is the header's system prompt, a later one a context message;
    # a role no chat reader knows is skipped with the reason
    messages = [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {"role": "developer", "content": "now in French"},
        {"role": "critic", "content": "meh"},
        {"role": "assistant", "content": "salut"},
    ]
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(messages))
    (result,) = import_path(path, format="openai")
    header = next(e for e in events(result) if e.type == "request/header")
    assert header.system == "be brief"  # type: ignore[attr-defined]
    (context,) = [e for e in events(result) if isinstance(e, ContextMessage)]
    assert context.message.content[0].text == "now in French"  # type: ignore[union-attr]
    assert result.skipped == [
        "message[3]: message with role 'critic': not a chat message this importer knows"
    ]


def test_openhands_single_run_document(tmp_path: Path) -> None:
    path = TRANSCRIPTS / "openhands/multi_swe_bench/output.jsonl"
    run = _jsonl(path)[0]
    single = tmp_path / "run.json"
    single.write_text(json.dumps(run, indent=2))
    assert detect_format(single) == "openhands"
    (result,) = import_path(single)
    assert result.tool_calls == imported(path)[0].tool_calls


def test_a_result_of_a_call_marked_not_dispatched_is_imported(tmp_path: Path) -> None:
    # pi: an aborted assistant message never ran its calls, unless the file holds a result
    call = {"type": "toolCall", "id": "t1", "name": "bash", "arguments": {"command": "ls"}}
    path = _write(
        tmp_path,
        "pi.jsonl",
        [
            {"type": "session", "id": "x", "cwd": "/"},
            {"type": "message", "message": {"role": "user", "content": "go"}},
            {
                "type": "message",
                "message": {
                    "role": "assistant",
                    "content": [call],
                    "provider": "p",
                    "model": "m",
                    "stopReason": "aborted",
                },
            },
            {
                "type": "message",
                "message": {"role": "toolResult", "toolCallId": "t1", "content": "partial"},
            },
        ],
    )
    (result,) = import_path(path, "pi")
    assert (result.tool_results, result.synthesized_results) == (1, 0)
    dispatched = next(e for e in events(result) if isinstance(e, ToolCall))
    answer = next(e for e in events(result) if isinstance(e, ToolResult))
    assert answer.source_event_seqs == (dispatched.seq,) and not answer.synthesized
    assert any("line 4" in n and "t1" in n for n in result.notes)


def test_a_repeated_call_id_in_one_message_is_dropped_and_reported(tmp_path: Path) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    path = _write(
        tmp_path,
        "chat.jsonl",
        [
            {"role": "user", "content": "list"},
            {"role": "assistant", "content": "", "tool_calls": [call, call]},
            {"role": "tool", "tool_call_id": "c1", "content": "a b"},
            {"role": "assistant", "content": "done"},
        ],
    )
    (result,) = import_path(path, "openai")
    assert (result.tool_calls, result.tool_results, result.synthesized_results) == (1, 1, 0)
    assert any("line 2 block" in s and "'c1'" in s for s in result.skipped)
    assert result.session.surface.is_balanced()
    assert render.pairing_problems(result.session.derive_messages()) == []


def test_results_outside_any_step_are_reported_with_the_right_reason(tmp_path: Path) -> None:
    use = [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]
    result = [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]
    path = _write(
        tmp_path,
        "cc.jsonl",
        [
            _cc("user", "u1", "fix it"),
            _cc("user", "r0", [{"type": "tool_result", "tool_use_id": "t0", "content": "?"}]),
            _cc("assistant", "a1", use, mid="m1"),
            _cc("user", "r1", result),
            _cc("user", "u2", "and then?"),
            _cc("user", "r2", result),  # the same result again, after the step closed
        ],
    )
    (main,) = import_path(path)
    assert (main.tool_calls, main.tool_results, main.synthesized_results) == (1, 1, 0)
    reasons = {s.split(":")[0]: s for s in main.skipped}
    assert "'t0' not imported (no matching call in its step)" in reasons["line 2 uuid r0"]
    assert "'t1' not imported (answered twice)" in reasons["line 6 uuid r2"]


# ---------------------------------------------------------------- every format of the registry

FIXTURE_FORMATS = {
    "tests/data/codex": "codex",
    "tests/data/transcripts/claude-code-log": "claude-code",
    "tests/data/transcripts/mini-swe-agent": "openai",
    "tests/data/transcripts/openhands": "openhands",
    "tests/data/transcripts/pi-mono": "pi",
    "tests/data/transcripts/spotter": "claude-code",
    "tests/data/transcripts/swe-agent": "openai",
    "tests/sessions/data": "openhands",
}
"""Each fixture directory and the format auto-detection finds for every transcript under it."""


def fixtures() -> list[Path]:
    """Every transcript under tests/data and tests/sessions/data."""
    roots = [ROOT / "tests" / "data", ROOT / "tests" / "sessions" / "data"]
    return sorted(
        p
        for root in roots
        for p in root.rglob("*")
        if p.is_file() and p.suffix in {".jsonl", ".json", ".traj"} and "LICENSES" not in p.parts
    )


def pinned_format(path: Path) -> str | None:
    relative = path.relative_to(ROOT).as_posix()
    return next((f for d, f in FIXTURE_FORMATS.items() if relative.startswith(d + "/")), None)


@pytest.mark.parametrize("path", fixtures(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_fixture_is_detected_as_its_pinned_format(path: Path) -> None:
    """The pinned directories keep their format; a fixture added with a new format (its own test
    pins it) is detected as some format of the registry."""
    found = detect_format(path)
    assert found in registry.names()
    assert found == pinned_format(path) or pinned_format(path) is None


@pytest.mark.parametrize("format", registry.BUILT_IN, ids=lambda f: f.name)
def test_every_built_in_format_has_a_fixture_it_imports(format: TranscriptFormat) -> None:
    """Found through the registry, not a list here: each format's fixtures are detected as it and
    import balanced, every event with its origin."""
    mine = [p for p in fixtures() if detect_format(p) == format.name]
    assert mine, f"no fixture under tests/data is detected as {format.name}"
    assert registry.named(format.name) is format
    assert all(registry.named(alias) is format for alias in format.aliases)
    for result in import_path(mine[0], format.name):
        assert result.format == format.name
        assert result.session.surface.is_balanced()
        assert [e.seq for e in events(result) if not e.origin] == []


def test_the_detection_order_and_the_names_come_from_the_registry() -> None:
    assert registry.names()[: len(registry.BUILT_IN)] == tuple(f.name for f in registry.BUILT_IN)
    assert len(set(registry.names()) | set(registry.aliases())) == len(registry.names()) + len(
        registry.aliases()
    )
    message = registry.expected()
    assert all(f.looks_like in message for f in registry.formats())
