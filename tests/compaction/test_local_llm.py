"""End to end: a short real session compacted through the OpenAI-compatible path against a real
model (llama.cpp serving SmolLM2-135M). Asserts the bracket, the provenance and the surface
invariants, not the summary's wisdom. Without the packages it skips locally and fails under CI=true."""

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
from tests.compaction.summarizers.test_local_model import GREEDY, require_local_model
from tests.conftest import TRANSCRIPTS

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
    config = BasicConfig(max_tokens=320, min_identifier_ratio=0.0, context_window=server.context_tokens)
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
    audits, log_checks = audit_events(list(reloaded.events()), min_ratio=0.0)
    assert all(c.passed for c in log_checks)
    assert len(audits) == 1 and audits[0].passed, [c for c in audits[0].checks if not c.passed]


def test_cli_compacts_with_the_local_model_and_stops_the_server(tmp_path: Path) -> None:
    """`compaction compact SESSION --summarizer local`: starts the embedded server, compacts, stops it."""
    import threading

    require_local_model()
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    session = import_path(SHORT_SESSION)[0].session
    with SessionStore.open(url) as store:
        store.save(session)
    before = threading.active_count()
    code, document = run_json(
        "--store", url, "compact", str(session.id),
        "--summarizer", "local", "--manual", "--min-ratio", "0", "--max-tokens", "320",
    )  # fmt: skip
    assert code == 0, document
    (compaction,) = document["compactions"]
    assert document["tokens_after"] < document["tokens_before"]
    with SessionStore.open(url) as store:
        summary = store.get(session.id).event(compaction["summary_seq"])
    assert isinstance(summary, CompactSummary)
    assert (summary.provider, summary.model) == ("local", "smollm2")
    assert threading.active_count() <= before  # the server's threads are gone
