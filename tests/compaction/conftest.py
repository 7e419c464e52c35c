"""Fixtures shared by the compaction tests."""

from __future__ import annotations

import pytest

from compaction.handover import identifiers
from compaction.sessions.blocks import Message


@pytest.fixture
def extracted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the messages whose identifiers were extracted (not recalled)."""
    seen: list[str] = []
    original = identifiers.message_kinds.compute

    def counting(message: Message) -> identifiers.Kinds:
        seen.append(message.id)
        return original(message)

    monkeypatch.setattr(identifiers.message_kinds, "compute", counting)
    return seen


@pytest.fixture(autouse=True)
def failure_reports(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Failed compactions that could not close their bracket report it under a test's own folder,
    not the system's temporary one (compaction.engine.lock.report_failure)."""
    monkeypatch.setenv("COMPACTION_FAILURE_DIR", str(tmp_path_factory.mktemp("failures")))
