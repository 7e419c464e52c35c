"""End to end against a real model (llama.cpp serving SmolLM2-135M): a short real session compacted
through the OpenAI-compatible path, and `compaction compact SID --summarizer local --manual` on the
public transcripts (LLM_SUBSET by default, all with COMPACTION_LLM_ALL=1), with the default gate.
Asserts the bracket, the provenance, the surface invariants, no connection retries and a passing
audit, not the summary's wisdom. Without the packages it skips locally and fails under CI=true."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from compaction.audit.checks import audit_events
from compaction.basic import BasicCompactService
from compaction.config import BasicConfig
from compaction.events import CompactEnd, CompactStart, CompactSummary
from compaction.meters import HeuristicMeter
from compaction.sessions.events import UserMessage
from compaction.sessions.importers import import_path
from compaction.sessions.render import pairing_problems
from compaction.sessions.store import SessionStore
from compaction.summarizers.chunking import ChunkingSummarizer
from compaction.summarizers.local import LocalModelServer, checkpoint_grammar
from tests.builders import run_json
from tests.compaction.summarizers.test_local_model import GREEDY, require_local_model, short_request
from tests.conftest import PUBLIC_TRANSCRIPTS, TRANSCRIPTS

pytestmark = pytest.mark.llm

SHORT_SESSION = TRANSCRIPTS / "swe-agent" / "6e44b9__sweagenttestrepo-1c2844.traj"
LLM_SUBSET = {
    "6e44b9__sweagenttestrepo-1c2844.traj",
    "github_issue.traj.json",
    "pydicom__pydicom-1458.traj",
}
"""The transcripts CI compacts with the real model by default: the largest set that stays under
about three minutes. `compact --manual` on a fresh import shadows everything but the task statement
and the newest unit: 336,030 heuristic tokens over the ten sessions of the public transcripts.
Measured here with one llama.cpp thread on a shared, loaded 2-core machine: pydicom (7,050 tokens)
102 s of CPU, 225 s wall; the Claude Code sample (66,005 tokens) 937 s wall; 7 to 14 ms of CPU per
token, so every transcript would take 40 to 80 minutes. These three shadow 8,819 tokens (swe-agent
555, mini-swe-agent 1,214, pydicom 7,050): 20 + 28 + 102 = 150 s of CPU (62 + 86 + 225 s wall on
the loaded machine).
``COMPACTION_LLM_ALL=1`` runs every one."""


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
    retained = reloaded.nodes[2:]  # the newest unit, kept verbatim
    assert retained and list(summary.shadowed_seqs) + retained == before[1:]
    assert set(replacement.source_event_seqs or ()) >= {start.seq, summary.seq, *summary.shadowed_seqs}
    # surface invariants
    assert reloaded.nodes[:2] == [first_user, replacement.seq]
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


def llm_transcripts() -> list[Path]:
    """The public transcripts the CI run compacts with the real model: those whose run fits about
    three minutes together (measured, see LLM_SUBSET); ``COMPACTION_LLM_ALL=1`` runs every one."""
    import os

    if os.environ.get("COMPACTION_LLM_ALL") == "1":
        return PUBLIC_TRANSCRIPTS
    return [p for p in PUBLIC_TRANSCRIPTS if p.name in LLM_SUBSET]


@pytest.mark.parametrize("path", llm_transcripts(), ids=lambda p: p.name)
def test_cli_compacts_a_public_transcript_with_the_local_model(
    path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`compaction compact SID --summarizer local --manual` (everything but the task statement and
    the newest unit) with the default gate: the chunks fit the server, no request is retried, the
    completion makes the small model's checkpoint pass, and the audit passes."""
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
            assert ours[0].fidelity is not None and not ours[0].fidelity.sections_missing
            assert ours[0].fidelity.retention_ratio >= 0.9
            audits, log_checks = audit_events(list(reloaded.events()))
            assert all(c.passed for c in log_checks)
            assert all(a.passed for a in audits), [a.failed for a in audits if not a.passed]
