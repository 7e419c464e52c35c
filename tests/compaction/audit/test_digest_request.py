"""A span sent as a digest is recorded on ``compact/summary.digest``, and ``audit --request``
rebuilds the digested request the server received, not the whole span; logs written before the
field decode and rebuild the whole span as before.

The summarizer is the ``local`` one as the registry builds it (a digest filling one request of a
4096-token window, priced by the local tokenizer's ratio, without the conversation's system prompt
and tools), pointed at a real aiohttp server speaking the OpenAI protocol instead of llama.cpp, so
no model is needed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

import msgspec
import pytest

from compaction.audit.checks import audit_events
from compaction.audit.request import rebuild_request
from compaction.engine.brackets import find_brackets
from compaction.engine.meters import HeuristicMeter
from compaction.engine.transaction import build_request
from compaction.errors import UnrebuildableError
from compaction.importers import import_path
from compaction.service import BasicCompactService
from compaction.sessions.events import SessionEvent
from compaction.sessions.mapper import decode_event, encode_event
from compaction.sessions.native import import_session
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from compaction.summarizers.chunking import ChunkingSummarizer
from compaction.summarizers.digest import DigestSummarizer
from compaction.summarizers.local import LOCAL_TOKEN_RATIO, LocalSummarizer, local_estimate
from compaction.summarizers.registry import LOCAL_CONTEXT_TOKENS, LOCAL_MAX_TOKENS
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.events import CompactSummary, DigestRecord
from compaction.vocabulary.summarizer import Summarizer
from tests.compaction.summarizers.provider_servers import ProviderServer
from tests.compaction.summarizers.test_http import chunk_replies
from tests.compaction.test_completion import WEAK
from tests.conftest import TRANSCRIPTS

PYDICOM = TRANSCRIPTS / "swe-agent" / "pydicom__pydicom-1458.traj"
GOLDEN = Path(__file__).parents[2] / "sessions" / "golden"


@dataclass(frozen=True)
class Digested:
    """One compaction through the local summarizer's digest: the log and the body received."""

    session_id: UUID
    events: list[SessionEvent]
    summary: CompactSummary
    body: dict[str, object]


def local_digest(server: ProviderServer) -> Summarizer:
    """What ``SUMMARIZERS.open("local")`` builds over its llama.cpp server, over ``server``."""
    estimate = local_estimate(HeuristicMeter().message)
    endpoint = LocalSummarizer(server.base_url, "smollm2", provider="local", max_retries=0)
    chunker = ChunkingSummarizer(endpoint, LOCAL_CONTEXT_TOKENS, estimate, elide=True, keep_header=False)
    return DigestSummarizer(chunker, estimate)


async def compact_through_the_digest(url: str) -> Digested:
    return await compact_once(url, local_digest)


async def compact_once(url: str, summarizer_for: Callable[[ProviderServer], Summarizer]) -> Digested:
    """One manual compaction of the pydicom session through ``summarizer_for(server)``, the log
    stored at ``url``, and the one request the server received."""
    session = import_path(PYDICOM)[0].session
    server = await ProviderServer().start()
    server.script(*chunk_replies([WEAK]))
    summarizer = summarizer_for(server)
    try:
        with SessionStore.open(url) as store:
            store.save(session)
            service = BasicCompactService(BasicConfig(max_tokens=LOCAL_MAX_TOKENS), summarizer=summarizer)
            result = await service.compact_now(session, store=store)
            assert result is not None
            events = list(store.get(session.id).events())
    finally:
        await summarizer.aclose()
        await server.stop()
    (received,) = server.received  # one request, whatever the span
    summary = events[result.start_seq + 1]
    assert isinstance(summary, CompactSummary)
    return Digested(session.id, events, summary, received.body)


@pytest.fixture(scope="module")
def digested(tmp_path_factory: pytest.TempPathFactory) -> Digested:
    url = f"sqlite:///{tmp_path_factory.mktemp('digest-audit') / 'sessions.db'}"
    return asyncio.run(compact_through_the_digest(url))


def with_digest(run: Digested, record: DigestRecord | None) -> list[SessionEvent]:
    """The log with the compaction's digest record replaced (an older or a newer code's record)."""
    summary = msgspec.structs.replace(run.summary, digest=record)
    return [summary if e.seq == summary.seq else e for e in run.events]


# ---------------------------------------------------------------- recorded, then rebuilt


def test_the_summary_records_the_digest_it_was_sent(digested: Digested) -> None:
    record = digested.summary.digest
    assert record is not None
    priced = (record.meter, record.ratio, record.window)
    assert priced == ("heuristic", LOCAL_TOKEN_RATIO, LOCAL_CONTEXT_TOKENS)
    assert record.header is False  # the local summarizer leaves the system prompt and tools out
    assert record.tokens <= record.budget < record.source_tokens
    assert record.elided > 0 and record.condensed > 0
    shadowed = len(digested.summary.shadowed_seqs)
    assert record.messages < record.source_messages == shadowed + 1  # and the task statement
    received = digested.body["messages"]
    assert isinstance(received, list) and len(received) == record.messages + 1  # + the instruction
    assert "tools" not in digested.body and received[0]["role"] == "user"


def test_audit_rebuilds_exactly_the_body_the_server_received(digested: Digested) -> None:
    record = digested.summary.digest
    assert record is not None
    rebuilt = rebuild_request(digested.session_id, digested.events, digested.summary.compaction_id)
    assert rebuilt.payload == digested.body
    assert rebuilt.digest == record and rebuilt.shape == "openai"
    assert rebuilt.as_json()["digest"] == msgspec.structs.asdict(record)
    notes = " | ".join(rebuilt.notes)
    assert "the span was sent as a digest" in notes and "system prompt and tools were left out" in notes
    assert "differs" not in notes
    # and not the whole span: that is what a log without the record rebuilds
    whole = rebuild_request(digested.session_id, with_digest(digested, None), rebuilt.compaction_id)
    assert whole.payload != digested.body and len(whole.request.messages) > len(rebuilt.request.messages)
    assert whole.digest is None and not any("digest" in n for n in whole.notes)


def test_the_audit_passes_on_a_digested_compaction(digested: Digested) -> None:
    audits, log_checks = audit_events(digested.events)
    assert all(c.passed for c in log_checks)
    assert len(audits) == 1 and audits[0].passed, audits[0].failed


def test_a_rebuild_that_no_longer_matches_the_record_says_so(digested: Digested) -> None:
    record = digested.summary.digest
    assert record is not None
    changed = msgspec.structs.replace(record, tokens=record.tokens + 7, elided=record.elided - 1)
    rebuilt = rebuild_request(digested.session_id, with_digest(digested, changed), record_id(digested))
    (note,) = [n for n in rebuilt.notes if "differs" in n]
    assert f"tokens {record.tokens + 7} -> {record.tokens}" in note
    assert f"elided {record.elided - 1} -> {record.elided}" in note
    assert rebuilt.payload == digested.body  # still today's digest of the same span


def test_a_digest_priced_by_an_unnamed_estimate_cannot_be_rebuilt(digested: Digested) -> None:
    record = digested.summary.digest
    assert record is not None
    unnamed = msgspec.structs.replace(record, meter="unnamed:my_price", ratio=1.0)
    with pytest.raises(UnrebuildableError, match=r"priced by 'unnamed:my_price', which the audit cannot"):
        rebuild_request(digested.session_id, with_digest(digested, unnamed), record_id(digested))


def record_id(run: Digested) -> str:
    return run.summary.compaction_id


# ---------------------------------------------------------------- logs older than the record


def test_the_record_round_trips_and_an_old_payload_without_it_decodes(digested: Digested) -> None:
    summary = digested.summary
    assert decode_event(summary.TYPE, encode_event(summary)) == summary
    payload = json.loads(encode_event(summary))
    del payload["digest"]
    old = decode_event(summary.TYPE, json.dumps(payload).encode())
    assert isinstance(old, CompactSummary) and old.digest is None
    assert old == msgspec.structs.replace(summary, digest=None)
    assert "digest" not in json.loads(encode_event(old))  # nothing new written for it either


@pytest.mark.parametrize("name", ["compacted.v1.jsonl", "compacted.v2.jsonl"])
def test_a_golden_log_without_digests_rebuilds_the_whole_span_as_before(name: str) -> None:
    session = import_session(GOLDEN / name)
    events = list(session.events())
    brackets = [b for b in find_brackets(events) if b.summary is not None]
    assert brackets
    for bracket in brackets:
        assert bracket.summary is not None and bracket.summary.digest is None
        rebuilt = rebuild_request(session.id, events, bracket.compaction_id)
        assert rebuilt.digest is None and rebuilt.as_json()["digest"] is None
        assert not any("digest" in note for note in rebuilt.notes)
        before = Session.replay(session.id, events[: bracket.start.seq + 1], strict_structure=False)
        seqs, max_tokens = bracket.summary.shadowed_seqs, rebuilt.request.max_tokens
        assert rebuilt.request == build_request(before, seqs, bracket.compaction_id, max_tokens)


# ---------------------------------------------------------------- sent whole, without the header


def local_chunker(server: ProviderServer) -> Summarizer:
    """The local model's chunker (no system prompt, no tools) without a digest, with a window the
    whole span fits in: one request of the whole span."""
    estimate = local_estimate(HeuristicMeter().message)
    endpoint = LocalSummarizer(server.base_url, "smollm2", provider="local", max_retries=0)
    return ChunkingSummarizer(endpoint, 1_000_000, estimate, elide=True, keep_header=False)


def test_a_request_sent_without_the_header_is_recorded_and_rebuilt_so(tmp_path: Path) -> None:
    """``compact/summary.header_sent`` says the summarizer left the system prompt and tools out
    (``--no-digest`` with the local model), and ``audit --request`` rebuilds exactly the body the
    server received; a log without the field rebuilds the request with them, as before."""
    run = asyncio.run(compact_once(f"sqlite:///{tmp_path / 'sessions.db'}", local_chunker))
    assert run.summary.digest is None and run.summary.header_sent is False
    assert "tools" not in run.body
    rebuilt = rebuild_request(run.session_id, run.events, run.summary.compaction_id)
    assert rebuilt.payload == run.body
    assert any("without the conversation's system prompt and tools" in n for n in rebuilt.notes)
    payload = json.loads(encode_event(run.summary))
    assert payload["header_sent"] is False
    del payload["header_sent"]  # a log written before the field
    old = decode_event(run.summary.TYPE, json.dumps(payload).encode())
    assert isinstance(old, CompactSummary) and old.header_sent is True
    older = [old if e.seq == old.seq else e for e in run.events]
    assert rebuild_request(run.session_id, older, old.compaction_id).payload != run.body
