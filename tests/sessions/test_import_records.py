"""What an import does with records it cannot take as they are: a timestamp out of range, a record
written twice (the same id, the same content), two records under one id with different content,
and a tool call id used twice."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from compaction.errors import TranscriptError
from compaction.importers import ImportedSession, import_path
from compaction.sessions import render
from compaction.sessions.blocks import ToolCallBlock
from tests.conftest import TRANSCRIPTS

DATA = Path(__file__).resolve().parent / "data"
CLAUDE_CODE = (
    TRANSCRIPTS
    / "claude-code-log"
    / "-Users-dain-workspace-claude-code-log-sample"
    / ("37f83ec9-f2ea-42a9-925e-0d5c105cb6e8.jsonl")
)
PI = TRANSCRIPTS / "pi-mono/large-session.jsonl"
CODEX = Path(__file__).resolve().parents[1] / "data" / "codex" / "function_call.jsonl"
OPENHANDS = TRANSCRIPTS / "openhands/multi_swe_bench/output.jsonl"


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


# ---------------------------------------------------------------- timestamps out of range

OUT_OF_RANGE = ["10000-01-01T00:00:00Z", 10**20, "2025-13-45T99:00:00Z", -5]


def _with_line_time(path: Path, tmp_path: Path, number: int, value: Any) -> Path:
    records = _lines(path)
    assert "timestamp" in records[number - 1]
    records[number - 1]["timestamp"] = value
    return _write(tmp_path / path.name, records)


@pytest.mark.parametrize("value", OUT_OF_RANGE, ids=str)
@pytest.mark.parametrize(
    ("path", "number"), [(CLAUDE_CODE, 8), (CLAUDE_CODE, 10), (PI, 3), (CODEX, 3)], ids=lambda x: str(x)[-12:]
)
def test_an_unusable_line_timestamp_is_noted_with_its_line_and_value(
    path: Path, number: int, value: Any, tmp_path: Path
) -> None:
    (imported, *_) = import_path(_with_line_time(path, tmp_path, number, value))
    noted = [n for n in imported.notes if "timestamp" in n and repr(value) in n]
    assert noted, f"no note names the timestamp {value!r}: {imported.notes}"
    assert all(n.startswith(f"line {number}") for n in noted), noted
    assert len(noted) == 1, noted


def test_an_unusable_openhands_event_timestamp_is_noted_with_its_event(tmp_path: Path) -> None:
    runs = _lines(OPENHANDS)
    event = next(e for e in runs[0]["history"] if "timestamp" in e and "tool_call_metadata" in e)
    event["timestamp"] = "10000-01-01T00:00:00"
    (first, *_) = import_path(_write(tmp_path / "output.jsonl", runs))
    noted = [n for n in first.notes if "'10000-01-01T00:00:00'" in n]
    assert noted and noted[0].startswith(f"run 1 event {event['id']}"), first.notes


# ---------------------------------------------------------------- records written twice

FIXTURES = sorted(
    p
    for root in (TRANSCRIPTS, CODEX.parent, DATA)
    for p in root.rglob("*")
    if p.is_file() and p.suffix in {".jsonl", ".json", ".traj"}
)
"""Every transcript fixture of tests/data and tests/sessions/data."""

ID_LESS = {"mini-swe-agent", "swe-agent", "gemini-cli"}
"""Messages that carry no id and no time (OpenAI-style messages, Gemini contents): a repeated one
cannot be told from a second message with the same text, so only those that carry tool call ids
are recognised as repeats (every result is imported once; a call without an id may be imported
twice, the first one then answered by a synthesized result)."""


def doubled(path: Path, tmp_path: Path) -> Path:
    """The file with every line (JSONL) or every message (a JSON document) written twice in a row."""
    text = path.read_text(encoding="utf-8")
    out = tmp_path / f"doubled-{path.name}"
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        out.write_text("".join(f"{line}\n{line}\n" for line in text.splitlines() if line.strip()), "utf-8")
        return out
    items = document if isinstance(document, list) else document["history"]
    twice = [item for item in items for _ in range(2)]
    out.write_text(
        json.dumps(twice if isinstance(document, list) else {**document, "history": twice}), "utf-8"
    )
    return out


def _counts(imported: ImportedSession) -> tuple[int, ...]:
    return (imported.tool_calls, imported.tool_results, imported.synthesized_results, imported.compactions)


def _call_ids_on_the_surface(imported: ImportedSession) -> list[str]:
    messages = imported.session.derive_messages()
    return [b.id for m in messages for b in m.content if isinstance(b, ToolCallBlock)]


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}"[-48:])
def test_a_file_with_every_record_twice_imports_as_the_file(path: Path, tmp_path: Path) -> None:
    once = import_path(path)
    twice = import_path(doubled(path, tmp_path))
    assert [s.format for s in twice] == [s.format for s in once]
    assert [s.tool_results for s in twice] == [s.tool_results for s in once]
    if path.parent.name not in ID_LESS:
        assert [_counts(s) for s in twice] == [_counts(s) for s in once]
        assert [s.messages for s in twice] == [s.messages for s in once]
        assert [len(s.session.nodes) for s in twice] == [len(s.session.nodes) for s in once]
    if path.parent.name not in ID_LESS or any(s.tool_calls for s in once):
        assert any("repeats" in why for s in twice for why in s.skipped)
    for imported in twice:
        ids = _call_ids_on_the_surface(imported)
        assert len(ids) == len(set(ids)), Counter(ids).most_common(3)
        sent = [b["id"] for m in render.to_anthropic(imported.session.derive_messages()) for b in _blocks(m)
                if b.get("type") == "tool_use"]  # fmt: skip
        assert len(sent) == len(set(sent))


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def test_a_doubled_claude_code_file_keeps_its_160_messages_and_186_calls(tmp_path: Path) -> None:
    """The case as found: 320 messages and 372 calls, no note, and duplicated tool_use ids sent."""
    original = TRANSCRIPTS / "spotter/258c7280-ae70-4798-800f-63464d01a85d.jsonl"
    (once,) = import_path(original)
    (twice,) = import_path(doubled(original, tmp_path))
    assert (once.messages, once.tool_calls) == (160, 186)
    assert (twice.messages, twice.tool_calls) == (160, 186)
    identified = [r for r in _lines(original) if r.get("uuid") or r.get("timestamp")]
    repeats = [s for s in twice.skipped if "repeats" in s]
    assert len(repeats) == len(identified)  # the others are metadata lines, skipped as such
    number = int(repeats[0].split()[1])
    assert f"repeats line {number - 1} uuid" in repeats[0] and "the same content" in repeats[0]


def test_the_same_uuid_with_other_content_fails_the_import_naming_both_lines(tmp_path: Path) -> None:
    records = _lines(CLAUDE_CODE)
    number = next(n for n, r in enumerate(records, 1) if r.get("type") == "user" and "uuid" in r)
    changed = {**records[number - 1], "timestamp": "2030-01-01T00:00:00Z"}
    path = _write(tmp_path / "conflict.jsonl", [*records, changed])
    with pytest.raises(TranscriptError, match=rf"line {len(records) + 1} .*uuid.* line {number}") as raised:
        import_path(path)
    assert "timestamp" in str(raised.value) and "nothing is imported" in str(raised.value)


def test_an_openhands_event_id_with_other_content_fails_the_import(tmp_path: Path) -> None:
    runs = _lines(OPENHANDS)
    history = runs[0]["history"]
    event = next(e for e in history if "tool_call_metadata" in e)
    history.append({**event, "message": "something else"})
    with pytest.raises(TranscriptError, match=rf"event {event['id']}"):
        import_path(_write(tmp_path / "output.jsonl", runs))


def test_a_call_id_reused_by_another_record_is_renamed_and_noted(tmp_path: Path) -> None:
    """Two different model calls with one call id (servers that number calls per response): both
    are kept, the second under a new id its result follows, and the note names both places."""
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [_call("call_0", "ls")]},
        {"role": "tool", "tool_call_id": "call_0", "content": "a.txt"},
        {"role": "assistant", "content": "", "tool_calls": [_call("call_0", "cat a.txt")]},
        {"role": "tool", "tool_call_id": "call_0", "content": "hello"},
    ]
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(messages))
    (imported,) = import_path(path)
    assert (imported.tool_calls, imported.tool_results, imported.synthesized_results) == (2, 2, 0)
    assert _call_ids_on_the_surface(imported) == ["call_0", "call_0#2"]
    (note,) = [n for n in imported.notes if "call_0" in n]
    assert note.startswith("message[3]") and "message[1]" in note and "'call_0#2'" in note


def _call(call_id: str, command: str) -> dict[str, Any]:
    arguments = json.dumps({"command": command})
    return {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": arguments}}
