"""The native event format: ``compaction export`` / ``compaction import --format events``.

Every public transcript is imported, compacted, exported by the CLI and imported by the CLI into a
fresh store of every backend: the restored session has the same events (seqs included), derived
messages, surface hash and audit results. Files that break the format are refused, naming the line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from compaction.audit.checks import audit_events
from compaction.cli.cmd_import import import_events
from compaction.cli.main import main
from compaction.errors import CompactionError, StoreError, TranscriptError
from compaction.importers import import_path
from compaction.service import BasicCompactService
from compaction.sessions.blocks import Message
from compaction.sessions.events import SessionEvent
from compaction.sessions.hashing import surface_hash
from compaction.sessions.native import FORMAT, UPCASTERS, VERSION, export_session, import_session
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from compaction.vocabulary.config import BasicConfig
from tests.builders import Doc, run_json, user
from tests.conftest import PUBLIC_TRANSCRIPTS


def audit_json(events: list[SessionEvent]) -> tuple[list[Doc], list[Doc]]:
    audits, checks = audit_events(events)
    return [a.as_json() for a in audits], [c.as_json() for c in checks]


@dataclass(frozen=True)
class Exported:
    session_id: UUID
    path: Path
    events: list[SessionEvent]
    messages: list[Message]
    surface_hash: str
    audit: tuple[list[Doc], list[Doc]]


def compact_once(store: SessionStore, session: Session) -> None:
    """A manual compaction with the template summarizer; a refused one still leaves a bracket."""
    service = BasicCompactService(BasicConfig(context_window=4000, min_identifier_ratio=0.0))
    with contextlib.suppress(CompactionError):
        asyncio.run(service.compact_now(session, store=store))


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> list[Exported]:
    """Every public transcript imported into SQLite, compacted, and exported by the CLI."""
    folder = tmp_path_factory.mktemp("native")
    url = f"sqlite:///{folder / 'source.db'}"
    with SessionStore.open(url) as store:
        for transcript in PUBLIC_TRANSCRIPTS:
            for imported in import_path(transcript):
                store.save(imported.session)
                compact_once(store, imported.session)
        ids = store.session_ids()
    result: list[Exported] = []
    for session_id in ids:
        path = folder / f"{session_id}.jsonl"
        code, document = run_json("--store", url, "export", str(session_id), "--out", str(path))
        assert code == 0, document
        assert document["path"] == str(path)
        with SessionStore.open(url) as store:
            session = store.get(session_id)
            events = list(session.events())
            assert document == {
                "session_id": str(session_id), "events": len(events),
                "surface_hash": surface_hash(session), "path": str(path),
            }  # fmt: skip
            result.append(
                Exported(session_id, path, events, session.derive_messages(), surface_hash(session),
                         audit_json(events))
            )  # fmt: skip
    return result


def test_the_sources_hold_compactions(exported: list[Exported]) -> None:
    assert len(exported) >= len(PUBLIC_TRANSCRIPTS)
    with_brackets = [e for e in exported if any(ev.type == "compact/start" for ev in e.events)]
    assert len(with_brackets) >= len(exported) // 2
    committed = [e for e in exported if any(ev.type == "compact/summary" for ev in e.events)]
    assert committed, "no compaction committed: the round trip would not cover replace events"


def restore(store: SessionStore, url: str, paths: list[Path]) -> list[Doc]:
    """``compaction import --format events`` (in this process for memory://, whose store lives only
    as long as the process: the command's own function there)."""
    if url == "memory://":
        return [import_events(store, path) for path in paths]
    code, document = run_json("--store", url, "import", "--format", "events", *map(str, paths))
    assert code == 0, document
    rows: list[Doc] = document["sessions"]
    return rows


def test_round_trip_of_every_public_transcript(store_url: str, exported: list[Exported]) -> None:
    with SessionStore.open(store_url) as store:
        rows = {row["session_id"]: row for row in restore(store, store_url, [e.path for e in exported])}
        for original in exported:
            row = rows[str(original.session_id)]
            assert (row["status"], row["format"]) == ("imported", "events")
            assert row["events"] == len(original.events)
            restored = store.get(original.session_id, use_snapshots=False)
            events = list(restored.events())
            assert events == original.events  # same seqs, types, times and payloads
            assert restored.derive_messages() == original.messages
            assert surface_hash(restored) == original.surface_hash
            assert audit_json(events) == original.audit


def test_export_then_import_is_idempotent(sqlite_url: str, exported: list[Exported]) -> None:
    one = exported[0]
    assert run_json("--store", sqlite_url, "import", str(one.path))[0] == 0  # auto-detects the format
    code, document = run_json("--store", sqlite_url, "import", "--format", "events", str(one.path))
    assert code == 0
    assert document["sessions"][0]["status"] == "already_imported"
    with SessionStore.open(sqlite_url) as store:
        assert len(store.get(one.session_id)) == len(one.events)


def test_re_export_reproduces_the_file(sqlite_url: str, tmp_path: Path, exported: list[Exported]) -> None:
    one = max(exported, key=lambda e: len(e.events))
    assert run_json("--store", sqlite_url, "import", str(one.path))[0] == 0
    again = tmp_path / "again.jsonl"
    code, document = run_json("--store", sqlite_url, "export", str(one.session_id)[:8], "--out", str(again))
    assert code == 0, document
    assert again.read_text(encoding="utf-8") == one.path.read_text(encoding="utf-8")


def test_header_and_event_lines(exported: list[Exported]) -> None:
    one = exported[0]
    lines = one.path.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    assert header["format"] == FORMAT and header["version"] == VERSION
    assert header["session_id"] == str(one.session_id)
    assert header["events"] == len(one.events) == len(lines) - 1
    assert header["surface_hash"] == one.surface_hash
    assert isinstance(header["library_version"], str) and header["library_version"]
    for seq, line in enumerate(lines[1:]):
        event = json.loads(line)
        keys = ["seq", "type", "time", "payload", "surface_op", "source_event_seqs", "hash"]
        assert list(event) == keys
        assert event["seq"] == seq and event["type"] == one.events[seq].type


# ---------------------------------------------------------------- refusals name the line


def small_export(exported: list[Exported]) -> Exported:
    return min((e for e in exported if len(e.events) >= 10), key=lambda e: len(e.events))


def rewrite(source: Path, target: Path, change: Any) -> Path:
    lines = source.read_text(encoding="utf-8").splitlines()
    target.write_text("\n".join(change(lines)) + "\n", encoding="utf-8")
    return target


def edit_line(lines: list[str], number: int, edit: Any) -> list[str]:
    """Apply ``edit`` to the parsed JSON of line ``number`` (1-based)."""
    changed = list(lines)
    data = json.loads(changed[number - 1])
    edit(data)
    changed[number - 1] = json.dumps(data)
    return changed


def first_line_of(lines: list[str], event_type: str) -> int:
    numbered = enumerate(lines, start=1)
    return next(n for n, line in numbered if n > 1 and json.loads(line)["type"] == event_type)


def assert_refused(url: str, path: Path, line: int, *fragments: str) -> None:
    code, document = run_json("--store", url, "import", "--format", "events", str(path))
    assert code == 1, document
    assert document["error"]["type"] == "TranscriptError"
    message = document["error"]["message"]
    assert f"{path}:{line}:" in message, message
    for fragment in fragments:
        assert fragment in message, message
    with SessionStore.open(url) as store:
        assert store.session_ids() == []  # nothing of a refused file is stored


def test_a_gap_in_the_seqs_is_refused(sqlite_url: str, tmp_path: Path, exported: list[Exported]) -> None:
    one = small_export(exported)
    path = rewrite(one.path, tmp_path / "gap.jsonl", lambda lines: lines[:5] + lines[6:])
    assert_refused(sqlite_url, path, 6, "seq 5 is not contiguous; expected 4")


def test_a_repeated_seq_is_refused(sqlite_url: str, tmp_path: Path, exported: list[Exported]) -> None:
    one = small_export(exported)
    path = rewrite(one.path, tmp_path / "repeat.jsonl", lambda lines: [*lines[:4], lines[3], *lines[4:]])
    assert_refused(sqlite_url, path, 5, "seq 2 is not contiguous; expected 3")


def test_a_rule_breaking_event_is_refused(sqlite_url: str, tmp_path: Path, exported: list[Exported]) -> None:
    one = small_export(exported)
    lines = one.path.read_text(encoding="utf-8").splitlines()
    number = first_line_of(lines, "turn/start")

    def carry_surface_op(data: Doc) -> None:
        data["surface_op"] = "append"  # a log-only type may not touch the surface

    path = rewrite(one.path, tmp_path / "rule.jsonl", lambda ls: edit_line(ls, number, carry_surface_op))
    assert_refused(sqlite_url, path, number, f"event seq {number - 2} breaks a rule")


def test_a_time_without_timezone_is_refused(
    sqlite_url: str, tmp_path: Path, exported: list[Exported]
) -> None:
    one = small_export(exported)
    lines = one.path.read_text(encoding="utf-8").splitlines()
    number = first_line_of(lines, "turn/start")

    def naive(data: Doc) -> None:
        data["time"] = data["time"].removesuffix("Z")  # every event's time is aware UTC

    path = rewrite(one.path, tmp_path / "naive.jsonl", lambda ls: edit_line(ls, number, naive))
    assert_refused(sqlite_url, path, number, "has no timezone; expected UTC")


def test_a_replace_of_missing_nodes_is_refused(
    sqlite_url: str, tmp_path: Path, exported: list[Exported]
) -> None:
    one = small_export(exported)
    lines = one.path.read_text(encoding="utf-8").splitlines()
    number = first_line_of(lines, "user/message")

    def replace_nothing(data: Doc) -> None:
        data["surface_op"] = {"op": "replace", "start": 900, "end": 901}

    path = rewrite(one.path, tmp_path / "replace.jsonl", lambda ls: edit_line(ls, number, replace_nothing))
    assert_refused(sqlite_url, path, number, "breaks a rule")


def test_an_unknown_type_is_refused(sqlite_url: str, tmp_path: Path, exported: list[Exported]) -> None:
    one = small_export(exported)

    def mystery(data: Doc) -> None:
        data["type"] = "mystery/event"

    path = rewrite(one.path, tmp_path / "unknown.jsonl", lambda ls: edit_line(ls, 4, mystery))
    assert_refused(sqlite_url, path, 4, "unknown event type 'mystery/event'")


def test_a_payload_of_the_wrong_shape_is_refused(
    sqlite_url: str, tmp_path: Path, exported: list[Exported]
) -> None:
    one = small_export(exported)
    lines = one.path.read_text(encoding="utf-8").splitlines()
    number = first_line_of(lines, "turn/start")

    def wrong(data: Doc) -> None:
        data["payload"]["turn"] = "one"

    path = rewrite(one.path, tmp_path / "shape.jsonl", lambda ls: edit_line(ls, number, wrong))
    assert_refused(sqlite_url, path, number, "turn/start", "Expected `int`")


def test_a_line_that_is_not_json_is_refused(
    sqlite_url: str, tmp_path: Path, exported: list[Exported]
) -> None:
    one = small_export(exported)
    path = rewrite(one.path, tmp_path / "json.jsonl", lambda ls: [*ls[:6], ls[6][:-9], *ls[7:]])
    assert_refused(sqlite_url, path, 7, "not an event line")


def test_an_altered_payload_fails_the_header_hash(
    sqlite_url: str, tmp_path: Path, exported: list[Exported]
) -> None:
    one = small_export(exported)
    lines = one.path.read_text(encoding="utf-8").splitlines()
    number = first_line_of(lines, "user/message")

    def alter(data: Doc) -> None:
        data["payload"]["message"]["content"] = [{"type": "text", "text": "something else"}]

    path = rewrite(one.path, tmp_path / "altered.jsonl", lambda ls: edit_line(ls, number, alter))
    assert_refused(sqlite_url, path, 1, "surface hash differs")


def test_a_truncated_file_fails_the_header_count(
    sqlite_url: str, tmp_path: Path, exported: list[Exported]
) -> None:
    one = small_export(exported)
    path = rewrite(one.path, tmp_path / "short.jsonl", lambda lines: lines[:-1])
    assert_refused(sqlite_url, path, 1, f"announces {len(one.events)} events but the file holds")


def test_a_header_only_file_is_refused(sqlite_url: str, tmp_path: Path, exported: list[Exported]) -> None:
    path = rewrite(exported[0].path, tmp_path / "empty.jsonl", lambda lines: lines[:1])
    assert_refused(sqlite_url, path, 2, "expected at least one event line")


def test_a_newer_format_version_is_refused(sqlite_url: str, tmp_path: Path, exported: list[Exported]) -> None:
    def bump(data: Doc) -> None:
        data["version"] = VERSION + 1

    path = rewrite(exported[0].path, tmp_path / "v9.jsonl", lambda ls: edit_line(ls, 1, bump))
    assert_refused(sqlite_url, path, 1, f"unsupported format version {VERSION + 1}")


def test_bytes_that_are_not_utf8_are_refused(
    sqlite_url: str, tmp_path: Path, exported: list[Exported]
) -> None:
    one = small_export(exported)
    raw = one.path.read_bytes().split(b"\n")
    raw[3] = raw[3][:20] + b"\xff\xfe" + raw[3][20:]
    path = tmp_path / "binary.jsonl"
    path.write_bytes(b"\n".join(raw))
    assert_refused(sqlite_url, path, 4, "expected UTF-8")


def test_the_same_id_with_other_events_is_refused(
    sqlite_url: str, tmp_path: Path, exported: list[Exported]
) -> None:
    one = small_export(exported)
    path = rewrite(one.path, tmp_path / "prefix.jsonl", lambda lines: lines)
    with SessionStore.open(sqlite_url) as store:
        other = store.create(one.session_id)
        for event in one.events[:5]:
            other.append(event)
        store.save(other)
    code, document = run_json("--store", sqlite_url, "import", "--format", "events", str(path))
    assert code == 1
    assert document["error"]["type"] == "StoreError"
    assert "already stored with different events" in document["error"]["message"]
    with SessionStore.open(sqlite_url) as store:
        assert len(store.get(one.session_id)) == 5


# ---------------------------------------------------------------- format evolution


def test_an_upcaster_rewrites_an_old_payload(
    tmp_path: Path, exported: list[Exported], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shape change: files of this version wrote ``turn/start`` as ``{"number": N}``
    (hypothetically); the upcaster for (type, version) rewrites it before decoding, and the session
    restores exactly (its content hash included)."""
    one = small_export(exported)
    lines = one.path.read_text(encoding="utf-8").splitlines()
    number = first_line_of(lines, "turn/start")

    def old_shape(data: Doc) -> None:
        data["payload"]["number"] = data["payload"].pop("turn")

    path = rewrite(one.path, tmp_path / "old.jsonl", lambda ls: edit_line(ls, number, old_shape))
    with pytest.raises(TranscriptError, match=f":{number}:"):
        import_session(path)

    def upcast(payload: Doc) -> Doc:
        if "number" in payload:
            payload["turn"] = payload.pop("number")
        return payload

    monkeypatch.setitem(UPCASTERS, ("turn/start", VERSION), upcast)
    restored = import_session(path)
    assert list(restored.events()) == one.events
    assert surface_hash(restored) == one.surface_hash


# ---------------------------------------------------------------- the export command


def test_export_defaults_to_a_file_named_by_the_session(
    sqlite_url: str, tmp_path: Path, exported: list[Exported], monkeypatch: pytest.MonkeyPatch
) -> None:
    one = small_export(exported)
    assert run_json("--store", sqlite_url, "import", str(one.path))[0] == 0
    monkeypatch.chdir(tmp_path)
    code, document = run_json("--store", sqlite_url, "export", str(one.session_id))
    assert code == 0, document
    assert document["path"] == f"{one.session_id}.events.jsonl"
    assert (tmp_path / document["path"]).read_bytes() == one.path.read_bytes()
    assert not list(tmp_path.glob(".*partial"))


def test_export_to_stdout(
    sqlite_url: str, exported: list[Exported], capsys: pytest.CaptureFixture[str]
) -> None:
    one = small_export(exported)
    assert run_json("--store", sqlite_url, "import", str(one.path))[0] == 0
    assert main(["--store", sqlite_url, "export", str(one.session_id), "--out", "-"]) == 0
    assert capsys.readouterr().out == one.path.read_text(encoding="utf-8")
    assert main(["--store", sqlite_url, "export", str(one.session_id), "--out", "-", "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["error"]["type"] == "UsageError"


def test_export_of_an_unknown_session_fails(sqlite_url: str) -> None:
    SessionStore.open(sqlite_url).close()  # the store exists; a missing one is StoreNotFoundError
    code, document = run_json("--store", sqlite_url, "export", "0123abcd")
    assert code == 1
    assert document["error"]["type"] == "SessionNotFoundError"


def test_export_human_output(
    sqlite_url: str, tmp_path: Path, exported: list[Exported], capsys: pytest.CaptureFixture[str]
) -> None:
    one = small_export(exported)
    assert run_json("--store", sqlite_url, "import", str(one.path))[0] == 0
    out = tmp_path / "x.jsonl"
    assert main(["--store", sqlite_url, "export", str(one.session_id), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"exported session {one.session_id}: {len(one.events)} events" in text
    assert str(out) in text.replace("\n", "")


def test_an_export_that_fails_mid_way_leaves_no_file(
    sqlite_url: str, tmp_path: Path, exported: list[Exported], monkeypatch: pytest.MonkeyPatch
) -> None:
    one = max(exported, key=lambda e: len(e.events))
    assert run_json("--store", sqlite_url, "import", str(one.path))[0] == 0
    read = SessionStore.iter_events
    cut = len(one.events) // 2

    def failing(store: SessionStore, *args: Any, **kwargs: Any) -> Iterator[SessionEvent]:
        for event in read(store, *args, **kwargs):
            if "only" not in kwargs and "window" not in kwargs and event.seq == cut:  # the lines
                raise StoreError("the store went away mid-way")
            yield event

    monkeypatch.setattr(SessionStore, "iter_events", failing)
    out = tmp_path / "out" / "x.jsonl"
    code, document = run_json("--store", sqlite_url, "export", str(one.session_id), "--out", str(out))
    assert code == 1 and document["error"]["type"] == "StoreError", document
    assert list(out.parent.iterdir()) == []  # neither the file nor its partial one
    monkeypatch.undo()
    code, document = run_json("--store", sqlite_url, "export", str(one.session_id), "--out", str(out))
    assert code == 0 and out.read_bytes() == one.path.read_bytes()


def test_text_of_every_kind_of_character_round_trips(tmp_path: Path) -> None:
    """Lines are compact JSON with text as UTF-8: quotes, backslashes, control characters, line
    and paragraph separators, DEL, accents and emoji come back as written, and hash-check."""
    text = 'é ✓ 🙂 "quoted" \\back\\ \n\t\r \x00\x01\x1f \x7f \u2028\u2029 \ud7ff'
    session = Session()
    user(session, text)
    path = tmp_path / "awkward.events.jsonl"
    export_session(session, path)
    # lines end at "\n" only (str.splitlines would also cut at the raw U+2028 the line holds)
    line = json.loads(path.read_text(encoding="utf-8").split("\n")[1])
    assert line["payload"]["message"]["content"][0]["text"] == text
    restored = import_session(path)
    assert list(restored.events()) == list(session.events())
