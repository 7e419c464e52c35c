"""What an import returns per session: the unsaved session and what the import did."""

from __future__ import annotations

from dataclasses import dataclass, field

from compaction.sessions.session import Session


@dataclass
class ImportedSession:
    """One imported session (unsaved: every event is pending) and what the import did."""

    session: Session
    source: str
    format: str
    events: int
    messages: int
    tool_calls: int
    tool_results: int
    synthesized_results: int
    compactions: int
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
