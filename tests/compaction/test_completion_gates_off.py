"""With the fidelity gate off (``require_sections=False``, ``min_identifier_ratio=0``) the default
completion adds nothing the gate does not need: on every public transcript, at small and larger
windows, a custom summarizer's summary is committed as written (plus the framing), the same
compactions over the same spans as with ``completion="off"``, and old history the summarizer chose
to drop is not copied back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from compaction.errors import EventCompactionError
from compaction.importers import import_path
from compaction.service import BasicCompactService
from compaction.sessions.blocks import TextBlock, text_of
from compaction.sessions.session import Session
from compaction.vocabulary.config import BasicConfig, CompletionMode
from compaction.vocabulary.events import CompactSummary
from compaction.vocabulary.summarizer import Summarizer, SummaryOutput, SummaryRequest
from tests.builders import user
from tests.compaction.test_identifier_fold import transcript_id
from tests.conftest import PUBLIC_TRANSCRIPTS

SENTINEL = "OLD HISTORY SENTINEL"
WINDOWS = (1_000, 4_000, 16_000, 40_000)


class LatestOnly(Summarizer):
    """A custom summarizer that keeps the newest message of the span and drops the rest."""

    provider = "mine"
    model = "latest-only"

    async def summarize(self, request: SummaryRequest) -> SummaryOutput:
        newest = next((m for m in reversed(request.messages) if text_of(m.content).strip()), None)
        said = " ".join(text_of(newest.content).split())[:120] if newest is not None else "nothing"
        return SummaryOutput(text=f"Latest: {said}", provider=self.provider, model=self.model)


Outcome = tuple[list[tuple[tuple[int, ...], str]], str | None]


def compacted(session: Session, window: int, completion: CompletionMode) -> Outcome:
    """Each committed compaction's shadowed seqs and summary text, and the failure's type."""
    config = BasicConfig(
        context_window=window,
        require_sections=False,
        min_identifier_ratio=0.0,
        completion=completion,
    )
    service = BasicCompactService(config, summarizer=LatestOnly())
    try:
        report = asyncio.run(service.compact_to_fit(session))
    except EventCompactionError as e:
        return [], type(e).__name__
    done = []
    for result in report.compactions:
        summary = session.event(result.summary_seq)
        assert isinstance(summary, CompactSummary)
        done.append((result.shadowed_seqs, text_of(summary.summary)))
    return done, None if report.failure is None else type(report.failure).__name__


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("path", PUBLIC_TRANSCRIPTS, ids=transcript_id)
def test_the_default_completion_commits_what_off_commits_as_written(path: Path, window: int) -> None:
    for off_item, default_item in zip(import_path(path), import_path(path), strict=True):
        off = compacted(off_item.session, window, "off")
        default = compacted(default_item.session, window, "appendix")
        assert default == off, (path.name, window)
        for _, text in default[0]:
            assert text.startswith("Latest: ") and "Verbatim references" not in text


def test_old_history_the_summarizer_dropped_is_not_copied_back() -> None:
    session = Session()
    user(session, "Keep the service green.")
    user(session, f"{SENTINEL}: an old ask the summarizer chose to drop. " + "filler words " * 200)
    for n in range(6):
        user(session, f"message {n}: " + "more filler " * 60)
    outcome, failure = compacted(session, 1_000, "appendix")
    assert failure is None and outcome
    for _, text in outcome:
        assert SENTINEL not in text and text.startswith("Latest: ")
    (checkpoint,) = [m for m in session.derive_messages() if m.id.startswith("checkpoint-")]
    assert SENTINEL not in "".join(b.text for b in checkpoint.content if isinstance(b, TextBlock))
