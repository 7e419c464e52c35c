"""Event-sourced context compaction for LLM agent sessions.

Importing ``compaction`` (which Python does before any ``compaction.*`` module) registers every
event type of the library (``compact/*``, ``scratchpad/set``, ``phase/end``) in the session event
registry and installs the importers' handler for other harnesses' compactions, so no result depends
on what else was imported. It imports nothing else eagerly: the public names below load on first use.

Subpackages: :mod:`compaction.sessions` (the log), :mod:`compaction.summarizers`,
:mod:`compaction.strategies`, :mod:`compaction.audit`, :mod:`compaction.cli`; :mod:`compaction.testing`
for scripted models; :mod:`compaction.errors` for the whole error tree. The public names are pinned by
``tests/test_public_api.py``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from compaction import events as _events  # noqa: F401  (registers the event types)
from compaction import foreign as _foreign  # noqa: F401  (installs the foreign-compaction handler)

if TYPE_CHECKING:
    from compaction.basic import BasicCompactService
    from compaction.config import BasicConfig
    from compaction.contract import CompactionResult, CompactService
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
    from compaction.events import (
        CompactEnd,
        CompactPrune,
        CompactStart,
        CompactSummary,
        Fidelity,
        Lease,
        PhaseEnd,
        ScratchpadSet,
    )
    from compaction.meters import HeuristicMeter, Meter, TiktokenMeter
    from compaction.strategies.checkpoint import CheckpointCompactService
    from compaction.strategies.overflow import OverflowRecovery
    from compaction.strategies.prune import PruneConfig, prune_session
    from compaction.summarizers.base import Summarizer, SummaryOutput, SummaryRequest
    from compaction.summarizers.template import TemplateSummarizer

_HOMES: dict[str, str] = {
    "BasicCompactService": "compaction.basic",
    "BasicConfig": "compaction.config",
    "BusyError": "compaction.errors",
    "CheckpointCompactService": "compaction.strategies.checkpoint",
    "CommitError": "compaction.errors",
    "CompactEnd": "compaction.events",
    "CompactPrune": "compaction.events",
    "CompactService": "compaction.contract",
    "CompactStart": "compaction.events",
    "CompactSummary": "compaction.events",
    "CompactionConfigError": "compaction.errors",
    "CompactionError": "compaction.errors",
    "CompactionResult": "compaction.contract",
    "ContextLengthError": "compaction.errors",
    "ConvergenceError": "compaction.errors",
    "EmptySummaryError": "compaction.errors",
    "Fidelity": "compaction.events",
    "FidelityError": "compaction.errors",
    "HeuristicMeter": "compaction.meters",
    "Lease": "compaction.events",
    "Meter": "compaction.meters",
    "OverflowRecovery": "compaction.strategies.overflow",
    "PhaseEnd": "compaction.events",
    "PruneConfig": "compaction.strategies.prune",
    "ScratchpadSet": "compaction.events",
    "ShrinkError": "compaction.errors",
    "SpanError": "compaction.errors",
    "Summarizer": "compaction.summarizers.base",
    "SummarizerError": "compaction.errors",
    "SummaryOutput": "compaction.summarizers.base",
    "SummaryRequest": "compaction.summarizers.base",
    "SurfaceChangedError": "compaction.errors",
    "TemplateSummarizer": "compaction.summarizers.template",
    "TiktokenMeter": "compaction.meters",
    "TruncatedError": "compaction.errors",
    "UnsupportedOutputError": "compaction.errors",
    "prune_session": "compaction.strategies.prune",
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
