"""What an import does with records it cannot take as they are: a timestamp out of range, a record
written twice (the same id, the same content), two records under one id with different content,
and a tool call id used twice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from compaction.importers import import_path
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
