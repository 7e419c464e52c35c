"""Offline compaction between turns (`compact_to_threshold`, the CLI's default) reaches the threshold
even when the bulk sits before the task statement (SWE-agent injects a demonstration there)."""

from __future__ import annotations

import asyncio

from compaction.audit.checks import audit_events
from compaction.importers import import_path
from compaction.service import BasicCompactService
from compaction.sessions.render import pairing_problems
from compaction.vocabulary.config import BasicConfig
from tests.conftest import TRANSCRIPTS

PYDICOM = TRANSCRIPTS / "swe-agent" / "pydicom__pydicom-1458.traj"


def test_what_precedes_the_task_statement_is_compacted_when_nothing_else_is_left() -> None:
    session = import_path(PYDICOM)[0].session
    task = session.first_user_seq
    assert task is not None and session.nodes.index(task) > 0  # a demonstration comes first
    service = BasicCompactService(BasicConfig(context_window=8000))
    threshold, _ = service.config.budget(8000)
    assert service.meter.measure(session).total_tokens > threshold
    results = asyncio.run(service.compact_to_threshold(session))
    assert service.meter.measure(session).total_tokens < threshold
    assert any(task not in r.shadowed_seqs and r.shadowed_seqs[-1] < task for r in results)
    assert task in session.nodes  # the task statement itself is never shadowed
    assert session.surface.is_balanced() and pairing_problems(session.derive_messages()) == []
    audits, log_checks = audit_events(list(session.events()))
    assert all(c.passed for c in log_checks) and all(a.passed for a in audits)
