"""Audit: replay any stored session and re-check every compaction, ours and other harnesses'.

    load_log / audit_session     the raw stored rows (tampered or not) -> per-compaction checks
    audit_events                 the same from events in memory
    rebuild_request              a compaction's summarization request, as it was sent
    surface_diff                 what the model saw at two seqs, shadowed spans beside checkpoints
    render_html                  the self-contained HTML report

``compaction.audit`` sits on top of ``compaction.sessions`` and the compaction core; the command line
(``compaction audit``, ``compaction show --diff``) composes it. See docs/audit.md.
"""

from compaction.audit.checks import (
    CHECK_NAMES,
    DEFAULT_MIN_RATIO,
    LOG_CHECK_NAMES,
    Check,
    CompactionAudit,
    audit_events,
)
from compaction.audit.diff import surface_diff
from compaction.audit.html import Limits, render_html
from compaction.audit.report import (
    SessionAudit,
    StoredLog,
    UnreadableEvent,
    audit_document,
    audit_log,
    audit_session,
    load_log,
)
from compaction.audit.request import RebuiltRequest, rebuild_request
from compaction.errors import AuditError, CompactionNotFoundError, UnrebuildableError

__all__ = [
    "CHECK_NAMES",
    "DEFAULT_MIN_RATIO",
    "LOG_CHECK_NAMES",
    "AuditError",
    "Check",
    "CompactionAudit",
    "CompactionNotFoundError",
    "Limits",
    "RebuiltRequest",
    "SessionAudit",
    "StoredLog",
    "UnreadableEvent",
    "UnrebuildableError",
    "audit_document",
    "audit_events",
    "audit_log",
    "audit_session",
    "load_log",
    "rebuild_request",
    "render_html",
    "surface_diff",
]
