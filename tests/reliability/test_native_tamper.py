"""Native exports whose shadowed events were edited: the surface hash cannot see
them (they are off the surface), so version 2 of the format records every event's content hash
and the import compares each one, naming the seq. Version 1 files still import."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from compaction.errors import TranscriptError
from compaction.sessions.hashing import surface_hash
from compaction.sessions.native import VERSION, event_hash, export_lines, import_session

GOLDEN = Path(__file__).parents[1] / "sessions" / "golden"


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _write(path: Path, lines: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def _shadowed_text_line(lines: list[dict[str, Any]]) -> int:
    """The index of a line whose event a compaction shadowed and that carries message text."""
    shadowed: set[int] = set()
    for line in lines[1:]:
        if isinstance(line.get("surface_op"), dict) and line["source_event_seqs"]:
            shadowed.update(line["source_event_seqs"][2:])
    for index, line in enumerate(lines[1:], start=1):
        if line["seq"] in shadowed and "text" in json.dumps(line["payload"]):
            return index
    raise AssertionError("the golden file has no shadowed message")


def _edit_text(payload: Any) -> bool:
    """Change the first text field found, in place."""
    if isinstance(payload, dict):
        if isinstance(payload.get("text"), str):
            payload["text"] += " (edited)"
            return True
        return any(_edit_text(v) for v in payload.values())
    if isinstance(payload, list):
        return any(_edit_text(v) for v in payload)
    return False


def test_the_current_format_records_a_content_hash_per_event(tmp_path: Path) -> None:
    session = import_session(GOLDEN / "compacted.v1.jsonl")
    lines = [json.loads(x) for x in export_lines(session)]
    assert lines[0]["version"] == VERSION == 2
    assert [line["hash"] for line in lines[1:]] == [event_hash(e) for e in session.events()]


def test_an_edited_shadowed_event_is_refused_naming_its_seq(tmp_path: Path) -> None:
    path = tmp_path / "edited.jsonl"
    lines = _lines(GOLDEN / "compacted.v2.jsonl")
    index = _shadowed_text_line(lines)
    assert _edit_text(lines[index]["payload"])
    _write(path, lines)
    seq = lines[index]["seq"]
    with pytest.raises(TranscriptError, match=rf":{index + 1}: event seq {seq} .* content hash"):
        import_session(path)


def test_the_surface_hash_alone_does_not_see_that_edit(tmp_path: Path) -> None:
    """Why the per-event hash is needed: the same edit leaves the surface hash unchanged."""
    lines = _lines(GOLDEN / "compacted.v2.jsonl")
    index = _shadowed_text_line(lines)
    _edit_text(lines[index]["payload"])
    for line in lines[1:]:
        line.pop("hash")
    lines[0]["version"] = 1
    path = tmp_path / "edited.v1.jsonl"
    _write(path, lines)
    session = import_session(path)  # a version-1 file carries no per-event hash
    assert surface_hash(session) == lines[0]["surface_hash"]


@pytest.mark.parametrize("change", ["missing", "not a string", "another event's"])
def test_a_missing_or_wrong_hash_is_refused(tmp_path: Path, change: str) -> None:
    lines = _lines(GOLDEN / "orphan.v2.jsonl")
    line = lines[3]
    if change == "missing":
        line.pop("hash")
    elif change == "not a string":
        line["hash"] = 7
    else:
        line["hash"] = lines[4]["hash"]
    path = tmp_path / "x.jsonl"
    _write(path, lines)
    with pytest.raises(TranscriptError, match=rf":4: event seq {line['seq']} "):
        import_session(path)


@pytest.mark.parametrize("name", ["compacted", "orphan", "pruned", "vocabulary"])
def test_version_1_exports_still_import(tmp_path: Path, name: str) -> None:
    shutil.copy(GOLDEN / f"{name}.v1.jsonl", tmp_path / "old.jsonl")
    old = import_session(tmp_path / "old.jsonl")  # no per-event hashes to compare
    header = _lines(tmp_path / "old.jsonl")[0]
    assert header["version"] == 1
    assert (len(old), surface_hash(old)) == (header["events"], header["surface_hash"])
