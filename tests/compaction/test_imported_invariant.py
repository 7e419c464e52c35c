"""Imported sessions end under the bracket invariant: each importer's session closes with the
``session/invariants`` marker, so the imported history (foreign compactions included) is left to
the audit while everything written after it (a malformed record, a compaction, recovery's repair)
is checked at append and on load, on every backend."""

from __future__ import annotations

import socket
import subprocess
import sys
from datetime import timedelta
from uuid import UUID

import msgspec
import pytest

from compaction.audit.report import audit_session
from compaction.cli.cmd_import import save_imported
from compaction.errors import BracketRuleError
from compaction.importers import ImportedSession, import_path
from compaction.importers.builder import IMPORT_BOUNDARY
from compaction.service import BasicCompactService
from compaction.sessions.blocks import TextBlock
from compaction.sessions.events import SessionInvariants, now_utc
from compaction.sessions.invariants import STRICT_INVARIANTS
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from compaction.summarizers.template import TemplateSummarizer
from compaction.vocabulary.events import CompactEnd, CompactStart, CompactSummary, Lease, ShadowedRange
from tests.builders import run_json
from tests.conftest import ROOT, TRANSCRIPTS

SOURCES = {
    "claude-code": TRANSCRIPTS / "spotter/258c7280-ae70-4798-800f-63464d01a85d.jsonl",
    "pi": TRANSCRIPTS / "pi-mono/large-session.jsonl",
    "openhands": TRANSCRIPTS / "openhands/multi_swe_bench/output.jsonl",
    "swe-agent": TRANSCRIPTS / "swe-agent/6e44b9__sweagenttestrepo-1c2844.traj",
    "mini-swe-agent": TRANSCRIPTS / "mini-swe-agent/github_issue.traj.json",
    "codex": ROOT / "tests/data/codex/compacted.jsonl",
}
"""One public transcript per importer (Claude Code's and Codex's hold a compaction of their own)."""

FOREIGN = {"claude-code", "codex"}


def imported(name: str) -> ImportedSession:
    return import_path(SOURCES[name])[0]


def stored(store: SessionStore, name: str) -> Session:
    """The first session of ``name``'s transcript, imported as ``compaction import`` saves it,
    read back from the store."""
    one = imported(name)
    assert save_imported(store, one)["status"] == "imported"
    return store.get(one.session.id, use_snapshots=False)


def summary_without_start(session: Session) -> CompactSummary:
    seqs = tuple(session.nodes[:2])
    return CompactSummary(
        compaction_id="c-stray",
        summary=(TextBlock("what happened"),),
        shadowed_range=ShadowedRange(seqs[0], seqs[-1]),
        shadowed_seqs=seqs,
        shadowed_token_count=40,
        provider="test",
        model="test-model",
    )


@pytest.mark.parametrize("name", SOURCES)
def test_the_import_ends_with_the_marker_after_the_imported_history(name: str) -> None:
    result = imported(name)
    session = result.session
    *history, marker = session.events()
    assert isinstance(marker, SessionInvariants)
    assert (marker.names, marker.origin) == (STRICT_INVARIANTS, IMPORT_BOUNDARY)
    assert not any(isinstance(e, SessionInvariants) for e in history)
    assert result.events == len(session) and session.invariants == STRICT_INVARIANTS
    assert all(e.origin for e in history), "every imported event names the input it came from"
    assert (session.type_counts.get(CompactStart.TYPE, 0) > 0) == (name in FOREIGN)


@pytest.mark.parametrize("name", SOURCES)
def test_a_malformed_bracket_after_the_import_is_refused_at_append_and_on_load(
    store: SessionStore, name: str
) -> None:
    session = stored(store, name)
    assert session.invariants == STRICT_INVARIANTS
    length = len(session)
    bad = summary_without_start(session)
    with pytest.raises(BracketRuleError, match="compact/summary has no matching compact/start") as refused:
        session.append(bad)
    assert f"(seq {length};" in str(refused.value) and len(session) == length
    store.append_events(session.id, [msgspec.structs.replace(bad, seq=length, time=now_utc())])
    with pytest.raises(BracketRuleError, match="compact/summary has no matching compact/start"):
        store.get(session.id, use_snapshots=False)


@pytest.mark.parametrize("name", SOURCES)
async def test_a_compaction_after_the_import_commits_under_the_invariant(sqlite_url: str, name: str) -> None:
    with SessionStore.open(sqlite_url) as store:
        session = stored(store, name)
        marker = len(session) - 1
        service = BasicCompactService(summarizer=TemplateSummarizer())
        result = await service.compact_now(session, store=store)
        assert result is not None and result.start_seq > marker
        loaded = store.get(session.id, use_snapshots=False)  # every event after the marker re-checked
        assert loaded.nodes == session.nodes and loaded.invariants == STRICT_INVARIANTS
        end = loaded.event(loaded.last_of(CompactEnd.TYPE) or -1)
        assert isinstance(end, CompactEnd) and end.compaction_id == result.compaction_id and not end.error
        checks = {c.name: c for c in audit_session(store, session.id).log_checks}
        assert checks["compact-brackets"].passed, checks["compact-brackets"].evidence


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.parametrize("name", SOURCES)
def test_recover_repairs_an_orphan_left_after_the_import(sqlite_url: str, name: str) -> None:
    status, document = run_json("--store", sqlite_url, "import", str(SOURCES[name]))
    assert status == 0
    first = document["sessions"][0]
    with SessionStore.open(sqlite_url) as store:
        session = store.get(UUID(first["session_id"]))
        assert len(session) == first["events"]
        expires = now_utc() + timedelta(seconds=600)  # a live lease, but its process is gone
        lease = Lease(host=socket.gethostname(), pid=dead_pid(), expires_at=expires)
        orphan = session.append(CompactStart(compaction_id="c-orphan", turn=None, lease=lease))
        store.save(session)  # the worker died here
    status, document = run_json("--store", sqlite_url, "recover", "--repair")
    assert status == 0, document
    (found,) = document["orphans"]
    assert (found["session_id"], found["start_seq"]) == (first["session_id"], orphan.seq)
    assert (found["inert"], found["action"]) == (True, "repaired")
    with SessionStore.open(sqlite_url) as store:
        repaired = store.get(UUID(first["session_id"]), use_snapshots=False)
        end = repaired.event(repaired.last_of(CompactEnd.TYPE) or -1)
        assert isinstance(end, CompactEnd) and end.compaction_id == "c-orphan" and end.error
        assert repaired.invariants == STRICT_INVARIANTS
        with pytest.raises(BracketRuleError, match="has no matching compact/start"):
            repaired.append(CompactEnd(compaction_id="c-orphan", turn=None, error="again"))
