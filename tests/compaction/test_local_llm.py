"""End to end against a real model (llama.cpp serving SmolLM2-135M): a short real session compacted
through the OpenAI-compatible path, `compaction compact SID --summarizer local --manual` on every
public transcript with the default gate, and the repair completion (one more model request).
Asserts the bracket, the provenance, the surface invariants, no connection retries and a passing
audit, not the summary's wisdom. Without the packages it skips locally and fails under CI=true.

The CLI runs cost one model request per compaction, whatever the span: ``local`` sends the span as
a digest that fills one request of the server's window (compaction.summarizers.digest). Sending
every message instead (chunked and merged, ``--no-digest``) took 40 to 80 CPU minutes over these
transcripts on 2 cores."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from compaction.audit.checks import audit_events
from compaction.audit.request import rebuild_request
from compaction.engine.meters import HeuristicMeter
from compaction.importers import import_path
from compaction.service import BasicCompactService
from compaction.sessions.blocks import text_of
from compaction.sessions.events import UserMessage
from compaction.sessions.render import pairing_problems
from compaction.sessions.store import SessionStore
from compaction.summarizers.chunking import ChunkingSummarizer
from compaction.summarizers.local import LocalModelServer, checkpoint_grammar
from compaction.summarizers.registry import LOCAL_CONTEXT_TOKENS
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.events import CompactEnd, CompactStart, CompactSummary
from tests.builders import run_json
from tests.compaction.summarizers.test_local_model import GREEDY, require_local_model, short_request
from tests.conftest import PUBLIC_TRANSCRIPTS, TRANSCRIPTS

pytestmark = pytest.mark.llm

SHORT_SESSION = TRANSCRIPTS / "swe-agent" / "6e44b9__sweagenttestrepo-1c2844.traj"


@pytest.fixture
def server() -> Iterator[LocalModelServer]:
    """Per test: llama.cpp runs one server per process, and the CLI test starts its own."""
    require_local_model()
    grammar = checkpoint_grammar(bullets=1, bullet_chars=32)
    with LocalModelServer(threads=1, context_tokens=4096, sampling=GREEDY, grammar=grammar) as running:
        yield running


async def test_real_model_compacts_a_real_session(server: LocalModelServer, tmp_path: Path) -> None:
    store = SessionStore.open(f"sqlite:///{tmp_path / 'sessions.db'}")
    session = import_path(SHORT_SESSION)[0].session
    store.save(session)
    first_user = session.first_user_seq
    meter = HeuristicMeter()
    summarizer = ChunkingSummarizer(server.summarizer(), server.context_tokens, meter.message)
    config = BasicConfig(max_tokens=320, context_window=server.context_tokens)  # the default gate
    service = BasicCompactService(config, summarizer=summarizer, meter=meter)
    before = list(session.nodes)
    try:
        result = await service.compact_now(session, store=store)
    finally:
        await summarizer.aclose()
    assert result is not None
    reloaded = store.get(session.id)
    start, summary, replacement, end = (
        reloaded.event(s) for s in range(result.start_seq, result.end_seq + 1)
    )
    assert isinstance(start, CompactStart) and isinstance(summary, CompactSummary)
    assert isinstance(replacement, UserMessage) and isinstance(end, CompactEnd) and end.error is None
    # provenance: the server's own model name, the cap, real usage
    assert (summary.provider, summary.model, summary.max_tokens) == ("local", "smollm2", 320)
    assert summary.usage is not None and summary.usage.output_tokens > 0
    retained = list(reloaded.nodes[2:])  # the newest unit, kept verbatim
    assert retained and list(summary.shadowed_seqs) + retained == before[1:]
    assert set(replacement.source_event_seqs or ()) >= {start.seq, summary.seq, *summary.shadowed_seqs}
    # surface invariants
    assert list(reloaded.nodes[:2]) == [first_user, replacement.seq]
    assert reloaded.surface.is_balanced()
    assert pairing_problems(reloaded.derive_messages()) == []
    audits, log_checks = audit_events(list(reloaded.events()))
    assert all(c.passed for c in log_checks)
    assert len(audits) == 1 and audits[0].passed, [c for c in audits[0].checks if not c.passed]


async def test_back_to_back_requests_to_the_real_server_need_no_retry(server: LocalModelServer) -> None:
    """llama.cpp's server closes each connection after a streamed reply; a reused keep-alive
    connection failed every other request ("Can not write request body" / "Server disconnected").
    With no retries allowed, three requests in a row must all succeed."""
    async with server.summarizer(max_retries=0) as summarizer:
        outputs = [await summarizer.summarize(short_request(320)) for _ in range(3)]
    assert all(o.text and o.usage is not None for o in outputs)


# ---------------------------------------------------------------- every public transcript


@pytest.mark.parametrize("path", PUBLIC_TRANSCRIPTS, ids=lambda p: p.name)
def test_cli_compacts_a_public_transcript_with_the_local_model(
    path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`compaction compact SID --summarizer local --manual` (everything but the task statement and
    the newest unit) with the default gate: the span goes as a digest in one request that fits the
    server, no request is retried, the completion makes the small model's checkpoint pass, and the
    audit passes."""
    import threading

    require_local_model()
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    sessions = [imported.session for imported in import_path(path)]
    with SessionStore.open(url) as store:
        for session in sessions:
            store.save(session)
    threads = threading.active_count()
    with caplog.at_level("WARNING", logger="compaction"):
        for session in sessions:
            code, document = run_json(
                "--store", url, "compact", str(session.id), "--summarizer", "local", "--manual"
            )
            assert code == 0, document
            assert len(document["compactions"]) == 1, document
    assert threading.active_count() <= threads  # each run stopped its server
    retries = [r.getMessage() for r in caplog.records if "retry" in r.getMessage()]
    assert retries == []  # no spurious connection retries
    with SessionStore.open(url) as store:
        for session in sessions:
            reloaded = store.get(session.id)
            summaries = [e for e in reloaded.events() if isinstance(e, CompactSummary)]
            ours = [s for s in summaries if s.provider == "local"]
            assert len(ours) == 1 and ours[0].completion is not None
            usage = ours[0].usage
            assert ours[0].chunks == 1 and usage is not None  # one request, whatever the span
            assert usage.input_tokens + usage.output_tokens <= LOCAL_CONTEXT_TOKENS
            assert ours[0].fidelity is not None and not ours[0].fidelity.sections_missing
            assert ours[0].fidelity.retention_ratio >= 0.9
            # the digest sent is recorded, and the audit digests the span again to the same counts
            digest = ours[0].digest
            assert digest is not None and not digest.header and digest.tokens <= digest.budget
            rebuilt = rebuild_request(session.id, list(reloaded.events()), ours[0].compaction_id)
            assert rebuilt.digest == digest and not [n for n in rebuilt.notes if "differs" in n]
            audits, log_checks = audit_events(list(reloaded.events()))
            assert all(c.passed for c in log_checks)
            assert all(a.passed for a in audits), [a.failed for a in audits if not a.passed]


def test_the_repair_completion_asks_the_real_model_once_more(tmp_path: Path) -> None:
    """`--completion both`: after the model's draft, one more request lists what the draft left
    out, and the model's rewrite is the checkpoint's own text, completed by the appendix. The gate
    is lowered to the sections (`--min-ratio 0`), and the audit runs with the same policy.
    SmolLM2-135M, greedy, copies the instruction's bracketed section descriptions into both the
    draft and the rewrite ("- [Exact file paths examined or changed, with what changed and why.]"):
    those lines are taken out as an echo of the instruction, their sections filled from the span's
    facts by the appendix, and the audit warns. With `--completion repair` alone (no appendix) the
    echoed rewrite has no section of its own and the gate refuses it."""
    require_local_model()
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    session = import_path(SHORT_SESSION)[0].session
    with SessionStore.open(url) as store:
        store.save(session)
    code, document = run_json(
        "--store", url, "compact", str(session.id), "--summarizer", "local", "--manual",
        "--completion", "both", "--min-ratio", "0",
    )  # fmt: skip
    assert code == 0, document
    (compaction,) = document["compactions"]
    with SessionStore.open(url) as store:
        reloaded = store.get(session.id)
    summary = reloaded.event(compaction["summary_seq"])
    assert isinstance(summary, CompactSummary) and summary.completion is not None
    completion = summary.completion
    assert completion.mode == "both" and completion.repair_error is None
    # the repair request was made and answered: its usage, and the first draft kept beside it
    assert completion.repair_usage is not None and completion.repair_usage.output_tokens > 0
    assert completion.draft
    assert summary.fidelity is not None and not summary.fidelity.sections_missing
    assert "[Exact file paths" not in text_of(summary.summary)  # the echo is not on the surface
    audits, log_checks = audit_events(list(reloaded.events()), min_ratio=0)  # the gate it ran with
    assert all(c.passed for c in log_checks)
    assert len(audits) == 1 and audits[0].passed, audits[0].failed
    if completion.echoed_lines:
        assert any("echoed the instruction" in w for w in audits[0].warnings)
