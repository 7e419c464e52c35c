"""``compaction audit`` and ``compaction show --diff``: the JSON document, exit codes, the human
report, the rebuilt summarization request (template, OpenAI-compatible and Anthropic, compared with
what the summarizer received or the server was sent), and the side-by-side diff."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from uuid import UUID

import msgspec
import pytest

from compaction.audit.report import load_log
from compaction.audit.request import rebuild_request
from compaction.cli.demo import run_demo_session
from compaction.engine.meters import HeuristicMeter
from compaction.engine.selection import select_span
from compaction.engine.transaction import build_request
from compaction.importers import import_path
from compaction.service import BasicCompactService
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from compaction.summarizers.anthropic import AnthropicSummarizer
from compaction.summarizers.openai import OpenAISummarizer
from compaction.summarizers.template import render_summary
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.summarizer import Summarizer, SummaryRequest
from tests.builders import Doc, run_human, run_json
from tests.compaction.summarizers.provider_servers import (
    ProviderServer,
    Reply,
    anthropic_frames,
    openai_frames,
    openai_usage,
)
from tests.compaction.summarizers.test_http import chunk_replies
from tests.compaction.test_completion import WEAK, provider
from tests.compaction.test_support import RecordingTemplateSummarizer
from tests.conftest import TRANSCRIPTS

__all__ = ["provider"]  # the completion tests' fixture: a provider server on its own thread

WINDOW = 6000


def demo(store: SessionStore, summarizer: Summarizer | None = None, *, compact: bool = True) -> Session:
    session = store.create()
    service = BasicCompactService(BasicConfig(context_window=WINDOW), summarizer=summarizer)
    asyncio.run(
        run_demo_session(
            session, store=store, turns=1, steps_per_turn=24, context_window=WINDOW,
            pre_step=[service.pre_step] if compact else [],
        )
    )  # fmt: skip
    store.save(session)
    return session


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, UUID, list[SummaryRequest]]:
    """A demo session auto-compacted by a recording template summarizer, on SQLite."""
    url = f"sqlite:///{tmp_path_factory.mktemp('audit-cli') / 'sessions.db'}"
    summarizer = RecordingTemplateSummarizer()
    with SessionStore.open(url) as store:
        session = demo(store, summarizer)
    assert len(summarizer.requests) >= 2
    return url, session.id, summarizer.requests


# ---------------------------------------------------------------- the audit document


def test_audit_json_document_passes_with_exit_zero(recorded: tuple[str, UUID, list[SummaryRequest]]) -> None:
    url, session_id, requests = recorded
    code, document = run_json("--store", url, "audit", str(session_id)[:8])
    assert code == 0 and document["passed"] is True
    (session,) = document["sessions"]
    assert session["session_id"] == str(session_id)
    assert [c["compaction_id"] for c in session["compactions"]] == [r.compaction_id for r in requests]
    for compaction in session["compactions"]:
        assert {"compaction_id", "outcome", "checks"} <= set(compaction)
        assert compaction["outcome"] == "committed"
        for check in compaction["checks"]:
            assert set(check) == {"name", "passed", "evidence", "applies"} and check["passed"]
    assert {c["name"] for c in session["log_checks"]} == {
        "stored-rows",
        "log-rules",
        "bracket-members",
        "compact-brackets",
        "unique-call-ids",
    }
    code, every = run_json("--store", url, "audit", "--all")
    assert code == 0 and [s["session_id"] for s in every["sessions"]] == [str(session_id)]


def test_audit_needs_a_session_or_all(recorded: tuple[str, UUID, list[SummaryRequest]]) -> None:
    url, session_id, _ = recorded
    for argv in (["audit"], ["audit", str(session_id), "--all"]):
        code, document = run_json("--store", url, *argv)
        assert code == 2 and document["error"]["type"] == "UsageError"


def test_human_report_and_exit_status_follow_the_checks(
    recorded: tuple[str, UUID, list[SummaryRequest]], tmp_path: Path
) -> None:
    url, session_id, requests = recorded
    code, out, _ = run_human("--store", url, "audit", str(session_id), "-v")
    assert code == 0
    assert "audit passed" in out and "content-hashes" in out and requests[0].compaction_id[:8] in out
    broken = tmp_path / "broken.db"
    source = sqlite3.connect(url.removeprefix("sqlite:///"))
    source.backup(target := sqlite3.connect(broken))
    source.close()
    summary_seq = _summary_seq(url, session_id)
    target.execute(
        "DELETE FROM stored_events WHERE originator_id=? AND originator_version=?",
        (session_id.hex, summary_seq + 2),  # the first compaction's compact/end
    )
    target.commit()
    target.close()
    code, out, _ = run_human("--store", f"sqlite:///{broken}", "audit", str(session_id))
    assert code == 1
    assert "audit failed" in out and "orphaned" in out and "bracket" in out
    code, document = run_json("--store", f"sqlite:///{broken}", "audit", "--all")
    assert code == 1 and document["passed"] is False


def _summary_seq(url: str, session_id: UUID) -> int:
    with SessionStore.open(url) as store:
        events = load_log(store, session_id).events
    return next(e.seq for e in events if e.TYPE == "compact/summary")


# ---------------------------------------------------------------- --request


def test_request_round_trip_equals_what_the_template_summarizer_received(
    recorded: tuple[str, UUID, list[SummaryRequest]],
) -> None:
    url, session_id, requests = recorded
    with SessionStore.open(url) as store:
        events = load_log(store, session_id).events
    for sent in requests:
        rebuilt = rebuild_request(session_id, events, sent.compaction_id)
        assert rebuilt.request == sent
        assert rebuilt.shape == "summary-request"
    sent = requests[-1]
    code, document = run_json("--store", url, "audit", "--request", sent.compaction_id[:8])
    assert code == 0 and document["kind"] == "request"
    assert document["request"] == json.loads(msgspec.json.encode(sent))
    assert document["provider"] == "template" and document["model"] == "template-v1"


def test_request_for_an_unknown_compaction_fails(recorded: tuple[str, UUID, list[SummaryRequest]]) -> None:
    url, _, _ = recorded
    code, document = run_json("--store", url, "audit", "--request", "no-such-compaction")
    assert code == 1 and document["error"]["type"] == "CompactionNotFoundError"
    assert "no-such-compaction" in document["error"]["message"]


async def _compact_over_http(store: SessionStore, session: Session, provider: str) -> tuple[str, Doc]:
    """Compact once through a real provider server; the compaction id and the body it received."""
    span = select_span(session, HeuristicMeter(), 0, keep_first_user=True)
    assert span is not None
    text = render_summary(build_request(session, span.seqs, "probe", 8192).messages)
    server = await ProviderServer().start()
    summarizer: OpenAISummarizer | AnthropicSummarizer
    if provider == "openai":
        server.script(Reply(frames=openai_frames([text], usage=openai_usage(900, 300))))
        summarizer = OpenAISummarizer(server.base_url, "gpt-4o-mini", api_key="sk-test")
    else:
        server.script(Reply(frames=anthropic_frames([text])))
        summarizer = AnthropicSummarizer(server.base_url, "claude-test", api_key="sk-test")
    try:
        service = BasicCompactService(BasicConfig(context_window=WINDOW), summarizer=summarizer)
        result = await service.compact_now(session, store=store)
    finally:
        await summarizer.aclose()
        await server.stop()
    assert result is not None and len(server.received) == 1
    return result.compaction_id, server.received[0].body


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_request_round_trip_equals_the_body_the_provider_received(provider: str, sqlite_url: str) -> None:
    with SessionStore.open(sqlite_url) as store:
        session = demo(store, compact=False)
        compaction_id, body = asyncio.run(_compact_over_http(store, session, provider))
    code, document = run_json("--store", sqlite_url, "audit", "--request", compaction_id)
    assert code == 0 and document["shape"] == provider
    assert document["request"] == body
    code, audited = run_json("--store", sqlite_url, "audit", str(session.id))
    assert code == 0 and audited["passed"], audited


def test_request_of_a_digested_compaction_is_the_body_the_server_received(
    provider: tuple[ProviderServer, asyncio.AbstractEventLoop], tmp_path: Path
) -> None:
    """`compact --digest-tokens N` sends the span as a digest and records it; `audit --request`
    prints that digested body, byte for byte the JSON the server parsed, and says it is a digest."""
    server, _ = provider
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    session = import_path(TRANSCRIPTS / "swe-agent" / "pydicom__pydicom-1458.traj")[0].session
    with SessionStore.open(url) as store:
        store.save(session)
    server.script(*chunk_replies([WEAK]))
    code, compacted = run_json(
        "--store", url, "compact", str(session.id), "--summarizer", "openai",
        "--base-url", server.base_url, "--model", "gpt-4o-mini", "--manual", "--digest-tokens", "900",
    )  # fmt: skip
    assert code == 0, compacted
    (compaction,) = compacted["compactions"]
    (received,) = server.received
    code, document = run_json("--store", url, "audit", "--request", compaction["compaction_id"])
    assert code == 0 and document["shape"] == "openai"
    assert document["request"] == received.body
    digest = document["digest"]
    recorded = (digest["budget"], digest["meter"], digest["ratio"], digest["header"])
    assert recorded == (900, "heuristic", 1.0, True)
    assert digest["tokens"] <= 900 and digest["elided"] > 0 and digest["window"] is None
    assert any(note.startswith("the span was sent as a digest") for note in document["notes"])
    code, out, err = run_human("--store", url, "audit", "--request", compaction["compaction_id"])
    assert code == 0 and json.loads(out) == received.body
    assert f"the span as a digest of {digest['messages']} of its {digest['source_messages']} messages" in err


# ---------------------------------------------------------------- show --diff


def test_diff_shows_the_shadowed_span_beside_its_checkpoint(
    recorded: tuple[str, UUID, list[SummaryRequest]],
) -> None:
    url, session_id, _ = recorded
    code, audit = run_json("--store", url, "audit", str(session_id))
    first = audit["sessions"][0]["compactions"][0]
    a, b = first["start_seq"] - 1, first["end_seq"]
    code, diff = run_json("--store", url, "show", str(session_id), "--diff", str(a), str(b))
    assert code == 0 and diff["kind"] == "diff" and (diff["a"], diff["b"]) == (a, b)
    (replacement,) = diff["replacements"]
    assert replacement["compaction_id"] == first["compaction_id"]
    assert [s["seq"] for s in replacement["shadowed"]] == first["shadowed_seqs"]
    assert "<compacted-summary>" in replacement["replacement"]["text"]
    assert set(diff["removed"]) == set(first["shadowed_seqs"])
    assert diff["tokens_b"] < diff["tokens_a"]
    code, out, _ = run_human("--store", url, "show", str(session_id), "--diff", str(b), str(a))
    assert code == 0
    assert f"shadowed seqs {first['shadowed_seqs'][0]}..{first['shadowed_seqs'][-1]}" in out
    assert "<compacted-summary>" in out and first["compaction_id"] in out


def test_diff_rejects_a_seq_outside_the_log(recorded: tuple[str, UUID, list[SummaryRequest]]) -> None:
    url, session_id, _ = recorded
    code, document = run_json("--store", url, "show", str(session_id), "--diff", "0", "99999")
    assert code == 1 and document["error"]["type"] == "ConfigurationError"
    assert "99999" in document["error"]["message"]
