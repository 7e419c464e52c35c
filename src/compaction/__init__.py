"""Compaction: the capability seam over session logs (contract, meters, basic backend, summarizers,
strategies). Importing this package registers its event types (``compact/*``, ``scratchpad/set``,
``phase/end``) in the session event registry, so stored logs that use them can be read, and the
handler that imports other harnesses' compactions as brackets.

The public names below are pinned by ``tests/test_public_api.py``. The model-backed summarizers live
in ``compaction.summarizers.openai`` / ``.anthropic`` / ``.local`` (they import aiohttp).
"""

from compaction import events as _events  # noqa: F401
from compaction import foreign as _foreign  # noqa: F401
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
from compaction.events import CompactEnd, CompactPrune, CompactStart, CompactSummary, Fidelity, Lease
from compaction.meters import HeuristicMeter, Meter, TiktokenMeter
from compaction.strategies.checkpoint import CheckpointCompactService, PhaseEnd, ScratchpadSet
from compaction.strategies.overflow import OverflowRecovery
from compaction.strategies.prune import PruneConfig, prune_session
from compaction.summarizers.base import Summarizer, SummaryOutput, SummaryRequest
from compaction.summarizers.template import TemplateSummarizer

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
