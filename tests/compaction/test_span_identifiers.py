"""What the audit checks an appendix against (``span_identifiers`` without the span's facts) is
exactly what the completion may add (with them): the facts' identifiers are the gate's of the span's
messages that are not checkpoints, so leaving the facts unread changes nothing. Checked at cuts of
every public transcript, before and after a compaction put a checkpoint on the surface."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from pathlib import Path

import pytest

from compaction.errors import CompactionError
from compaction.handover.completion import span_identifiers
from compaction.handover.facts import span_facts
from compaction.handover.identifiers import Identifiers
from compaction.importers import import_path
from compaction.service import BasicCompactService
from compaction.sessions.blocks import Message
from compaction.vocabulary.checkpoint import is_checkpoint
from compaction.vocabulary.config import BasicConfig
from tests.compaction.test_identifier_fold import cuts, transcript_id
from tests.conftest import PUBLIC_TRANSCRIPTS


def kinds(found: Identifiers) -> tuple[list[str], ...]:
    return tuple(
        list(group) for group in (found.paths, found.commands, found.errors, found.error_lines, found.ids)
    )


def check_cuts(messages: Sequence[Message]) -> int:
    for cut in cuts(0, len(messages)):
        span = list(messages[:cut])
        assert kinds(span_identifiers(span)) == kinds(span_identifiers(span, span_facts(span)))
    return len(messages)


@pytest.mark.parametrize("path", PUBLIC_TRANSCRIPTS, ids=transcript_id)
def test_the_facts_add_no_identifier_to_the_span_s_own(path: Path) -> None:
    checked = with_checkpoint = 0
    for item in import_path(path):
        session = item.session
        checked += check_cuts(session.derive_messages())
        service = BasicCompactService(BasicConfig(context_window=4000, min_identifier_ratio=0.0))
        with contextlib.suppress(CompactionError):  # a refused compaction leaves no checkpoint
            asyncio.run(service.compact_now(session))
        surface = session.derive_messages()
        if any(is_checkpoint(m) for m in surface):
            with_checkpoint += check_cuts(surface)
    assert checked and with_checkpoint  # spans with and without a prior checkpoint were compared
