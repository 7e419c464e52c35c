"""Golden native exports (``tests/sessions/golden/*.vN.jsonl``): every later version must still import
and audit them. They are committed files, written once by ``tests/sessions/golden/make_golden.py``;
these tests read them as they are and never regenerate them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compaction.audit.checks import audit_events
from compaction.sessions.hashing import surface_hash
from compaction.sessions.native import VERSION, export_lines, import_session, read_header
from compaction.sessions.store import SessionStore
from recovery.scan import OrphanScanner

GOLDEN = Path(__file__).with_name("golden")
FILES = sorted(GOLDEN.glob("*.v*.jsonl"))
KINDS = ("compacted", "orphan", "pruned", "vocabulary")

# What the audit of each kind must find: outcome -> count of compactions / prunings.
OUTCOMES = {
    "compacted": {"committed": 2},
    "orphan": {"orphaned": 1},
    "pruned": {"committed": 2},
    "vocabulary": {"failed": 1},
}


def kind_of(path: Path) -> str:
    return path.name.split(".")[0]


def test_every_kind_is_committed_for_version_1() -> None:
    assert {kind_of(p) for p in FILES if p.name.endswith(".v1.jsonl")} == set(KINDS)
    assert all(kind_of(p) in KINDS for p in FILES)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_golden_file_imports_exactly(path: Path) -> None:
    header = read_header(path)
    session = import_session(path)  # re-checks every rule, the count and the surface hash
    assert str(session.id) == header["session_id"]
    assert len(session) == header["events"]
    assert surface_hash(session) == header["surface_hash"]
    assert [e.seq for e in session.events()] == list(range(len(session)))


CURRENT = [p for p in FILES if read_header(p)["version"] == VERSION]


@pytest.mark.parametrize("path", CURRENT, ids=lambda p: p.name)
def test_a_current_version_file_re_exports_byte_for_byte(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    again = list(export_lines(import_session(path)))
    header, again_header = json.loads(lines[0]), json.loads(again[0])
    header.pop("library_version")
    again_header.pop("library_version")
    assert again_header == header
    # A line of a type whose class has since raised its class_version re-exports upcast (and says
    # so); every other line is byte for byte what was written.
    upcast = [i for i, line in enumerate(again[1:]) if "class_version" in json.loads(line)]
    assert [a for i, a in enumerate(again[1:]) if i not in upcast] == [
        old for i, old in enumerate(lines[1:]) if i not in upcast
    ]
    for i in upcast:
        assert "class_version" not in json.loads(lines[1 + i])


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_golden_file_audits(path: Path) -> None:
    audits, log_checks = audit_events(list(import_session(path).events()))
    assert all(c.passed for c in log_checks), [c.as_json() for c in log_checks]
    outcomes: dict[str, int] = {}
    for audit in audits:
        outcomes[audit.outcome] = outcomes.get(audit.outcome, 0) + 1
    assert outcomes == OUTCOMES[kind_of(path)]
    if kind_of(path) == "orphan":
        (orphan,) = audits
        failed = [c for c in orphan.checks if not c.passed]
        assert failed and all("no compact/end" in c.evidence for c in failed), orphan.as_json()
    else:
        assert all(a.passed for a in audits), [a.as_json() for a in audits if not a.passed]


def test_golden_kinds_hold_what_they_are_named_for() -> None:
    types = {kind_of(p): {e.type for e in import_session(p).events()} for p in FILES}
    assert {"compact/start", "compact/summary", "compact/end"} <= types["compacted"]
    assert {"compact/prune"} <= types["pruned"]
    assert "compact/end" not in types["orphan"] and "compact/start" in types["orphan"]
    session_types = {
        "user/message", "assistant/message", "tool/result", "context/message", "steering/message",
        "turn/start", "turn/end", "step/start", "step/end", "assistant/chunk", "tool/call",
        "request/header", "session/resume",
    }  # fmt: skip
    assert session_types <= types["vocabulary"]


def test_golden_files_load_from_every_backend(store_url: str) -> None:
    sessions = [import_session(p) for p in CURRENT]  # each version's files share session ids
    with SessionStore.open(store_url) as store:
        for session in sessions:
            store.save(session)
        for session in sessions:
            stored = store.get(session.id, use_snapshots=False)
            assert list(stored.events()) == list(session.events())
            assert surface_hash(stored) == surface_hash(session)
        scanner = OrphanScanner(store)
        scanner.poll()
        orphan = next(s for p, s in zip(CURRENT, sessions, strict=True) if kind_of(p) == "orphan")
        assert [(o.session_id, o.start_seq) for o in scanner.orphans] == [(orphan.id, len(orphan) - 1)]
