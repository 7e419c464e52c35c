"""The guarded public surface: each package's ``__all__`` is sorted, importable, and pinned here, so
an export that goes missing fails a test (STYLE.md, practice 9)."""

from __future__ import annotations

import importlib

import pytest

PINNED: dict[str, set[str]] = {
    "compaction.importers": {
        "NAMESPACE",
        "ImportedSession",
        "TranscriptFormat",
        "detect_format",
        "import_path",
    },
    "compaction.sessions": {
        "APPEND",
        "AssistantChunk",
        "AssistantMessage",
        "CommandDone",
        "CommandRun",
        "ConcurrencyError",
        "ConfigurationError",
        "ContextMessage",
        "CorruptSurfaceError",
        "EventCompactionError",
        "EventRuleError",
        "EventVersionError",
        "ImageBlock",
        "Message",
        "OpaqueBlock",
        "ReasoningBlock",
        "Replace",
        "RequestHeader",
        "Session",
        "SessionEvent",
        "SessionInvariants",
        "SessionNotFoundError",
        "SessionResume",
        "SessionStateError",
        "SessionStore",
        "Source",
        "SteeringMessage",
        "StepEnd",
        "StepStart",
        "StoreError",
        "StructureRuleError",
        "Surface",
        "SurfaceRuleError",
        "TextBlock",
        "ToolCall",
        "ToolCallBlock",
        "ToolError",
        "ToolResult",
        "ToolResultBlock",
        "ToolSpec",
        "TranscriptError",
        "TurnEnd",
        "TurnEndReason",
        "TurnStart",
        "UnknownEvent",
        "UnknownEventTypeError",
        "Usage",
        "UserMessage",
        "pairing_problems",
        "register_event_type",
        "to_anthropic",
        "to_openai",
        "to_text",
    },
    "compaction": {
        "BasicCompactService",
        "BasicConfig",
        "BusyError",
        "CheckpointCompactService",
        "CommitError",
        "CompactEnd",
        "CompactPrune",
        "CompactService",
        "CompactStart",
        "CompactSummary",
        "CompactionConfigError",
        "CompactionError",
        "CompactionResult",
        "ContextLengthError",
        "ConvergenceError",
        "EmptySummaryError",
        "Fidelity",
        "FidelityError",
        "HeuristicMeter",
        "Lease",
        "Meter",
        "OverflowRecovery",
        "PhaseEnd",
        "PruneConfig",
        "ScratchpadSet",
        "ShrinkError",
        "SpanError",
        "Summarizer",
        "SummarizerError",
        "SummaryOutput",
        "SummaryRequest",
        "SurfaceChangedError",
        "TemplateSummarizer",
        "TiktokenMeter",
        "TruncatedError",
        "UnsupportedOutputError",
        "prune_session",
    },
}


@pytest.mark.parametrize("package", sorted(PINNED))
def test_exports_are_pinned_sorted_and_importable(package: str) -> None:
    module = importlib.import_module(package)
    exported = list(module.__all__)
    assert exported == sorted(exported)
    assert set(exported) == PINNED[package]
    for name in exported:
        assert getattr(module, name) is not None


def test_every_error_is_under_the_one_root() -> None:
    import compaction
    import projections
    import recovery
    from compaction import audit, sessions

    root = sessions.EventCompactionError
    for module in (sessions, compaction, projections, recovery, audit):
        for name in getattr(module, "__all__", []):
            value = getattr(module, name)
            if isinstance(value, type) and issubclass(value, Exception):
                assert issubclass(value, root), f"{module.__name__}.{name} is outside the hierarchy"


def test_every_public_error_class_is_defined_in_the_one_errors_module() -> None:
    """The whole tree lives in compaction/errors.py; other modules import (and may re-export) it."""
    import ast
    import inspect
    from pathlib import Path

    from compaction import errors

    root = Path(inspect.getfile(errors)).parents[1]
    elsewhere = []
    for package in ("compaction", "projections", "recovery"):
        for path in (root / package).rglob("*.py"):
            if path == Path(errors.__file__):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    bases = [ast.unparse(b) for b in node.bases]
                    if any(b.endswith(("Error", "Exception")) for b in bases):
                        elsewhere.append(f"{path.relative_to(root)}:{node.lineno} {node.name}")
    assert not elsewhere, f"error classes outside compaction/errors.py: {elsewhere}"
