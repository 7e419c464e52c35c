"""Event-sourced context compaction for LLM agent sessions.

Importing ``compaction`` (which Python does before any ``compaction.*`` module) loads nothing: the
public names below load on first use, and the log's event types defined above the log are resolved
by topic when a stored row first names them (:data:`compaction.sessions.events.EVENT_TOPICS`), so
no result depends on what else was imported.

The rooms, bottom up (docs/architecture.md): :mod:`compaction.errors` (the whole error tree),
:mod:`compaction.sessions` (the log), :mod:`compaction.vocabulary` (the words every room shares),
:mod:`compaction.handover` (what a checkpoint must keep), :mod:`compaction.engine` (when and where
to cut, how to commit), then :mod:`compaction.summarizers`, :mod:`compaction.strategies`,
:mod:`compaction.importers` (transcripts into sessions), :mod:`compaction.service` (the engine
with its default summarizer), :mod:`compaction.audit`,
:mod:`compaction.integrations` and :mod:`compaction.cli`; :mod:`compaction.testing` for scripted
models. The public names are pinned by ``tests/test_public_api.py``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from compaction.engine.meters import HeuristicMeter, Meter, TiktokenMeter
    from compaction.engine.prune import PruneConfig, prune_session
    from compaction.errors import (
        BusyError,
        CommitError,
        CompactionConfigError,
        CompactionError,
        ContextLengthError,
        ConvergenceError,
        EmptySummaryError,
        FidelityError,
        ShrinkError,
        SpanError,
        SummarizerError,
        SurfaceChangedError,
        TruncatedError,
        UnsupportedOutputError,
    )
    from compaction.service import BasicCompactService
    from compaction.strategies.checkpoint import CheckpointCompactService
    from compaction.strategies.overflow import OverflowRecovery
    from compaction.summarizers.template import TemplateSummarizer
    from compaction.vocabulary.config import BasicConfig
    from compaction.vocabulary.contract import CompactionResult, CompactService
    from compaction.vocabulary.events import (
        CompactEnd,
        CompactPrune,
        CompactStart,
        CompactSummary,
        Fidelity,
        Lease,
        PhaseEnd,
        ScratchpadSet,
    )
    from compaction.vocabulary.summarizer import Summarizer, SummaryOutput, SummaryRequest

_HOMES: dict[str, str] = {
    "BasicCompactService": "compaction.service",
    "BasicConfig": "compaction.vocabulary.config",
    "BusyError": "compaction.errors",
    "CheckpointCompactService": "compaction.strategies.checkpoint",
    "CommitError": "compaction.errors",
    "CompactEnd": "compaction.vocabulary.events",
    "CompactPrune": "compaction.vocabulary.events",
    "CompactService": "compaction.vocabulary.contract",
    "CompactStart": "compaction.vocabulary.events",
    "CompactSummary": "compaction.vocabulary.events",
    "CompactionConfigError": "compaction.errors",
    "CompactionError": "compaction.errors",
    "CompactionResult": "compaction.vocabulary.contract",
    "ContextLengthError": "compaction.errors",
    "ConvergenceError": "compaction.errors",
    "EmptySummaryError": "compaction.errors",
    "Fidelity": "compaction.vocabulary.events",
    "FidelityError": "compaction.errors",
    "HeuristicMeter": "compaction.engine.meters",
    "Lease": "compaction.vocabulary.events",
    "Meter": "compaction.engine.meters",
    "OverflowRecovery": "compaction.strategies.overflow",
    "PhaseEnd": "compaction.vocabulary.events",
    "PruneConfig": "compaction.engine.prune",
    "ScratchpadSet": "compaction.vocabulary.events",
    "ShrinkError": "compaction.errors",
    "SpanError": "compaction.errors",
    "Summarizer": "compaction.vocabulary.summarizer",
    "SummarizerError": "compaction.errors",
    "SummaryOutput": "compaction.vocabulary.summarizer",
    "SummaryRequest": "compaction.vocabulary.summarizer",
    "SurfaceChangedError": "compaction.errors",
    "TemplateSummarizer": "compaction.summarizers.template",
    "TiktokenMeter": "compaction.engine.meters",
    "TruncatedError": "compaction.errors",
    "UnsupportedOutputError": "compaction.errors",
    "prune_session": "compaction.engine.prune",
}

__all__ = [
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
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'compaction' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
