"""The composition root of the compaction service: the engine with the template summarizer.

:class:`~compaction.engine.service.CompactionEngine` (when and where to cut, how to commit)
receives its summarizer; :class:`BasicCompactService` gives it
:class:`~compaction.summarizers.template.TemplateSummarizer` when none is passed.
This module sits above the engine and the summarizers, so neither imports the other.
"""

from __future__ import annotations

from collections.abc import Callable

from compaction.engine.meters import Meter
from compaction.engine.prune import PruneConfig
from compaction.engine.service import CompactionEngine
from compaction.engine.windows import WindowTable
from compaction.summarizers.template import TemplateSummarizer
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.summarizer import Summarizer

__all__ = ["BasicCompactService"]


class BasicCompactService(CompactionEngine):
    """The compaction engine; the template summarizer unless ``summarizer`` is given."""

    def __init__(
        self,
        config: BasicConfig | None = None,
        *,
        summarizer: Summarizer | None = None,
        meter: Meter | None = None,
        on_progress: Callable[[str], None] | None = None,
        pruner: PruneConfig | None = None,
        windows: WindowTable | None = None,
        analysis_bytes: int | None = None,
    ) -> None:
        super().__init__(
            config,
            summarizer=summarizer or TemplateSummarizer(),
            meter=meter,
            on_progress=on_progress,
            pruner=pruner,
            windows=windows,
            analysis_bytes=analysis_bytes,
        )
