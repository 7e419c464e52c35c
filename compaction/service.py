"""The composition root of the compaction service: the engine with the template summarizer.

:class:`~compaction.engine.service.CompactionEngine` (when and where to cut, how to commit) is
given its summarizer and names none; :class:`BasicCompactService` is the engine whose default is
:class:`~compaction.summarizers.template.TemplateSummarizer`, used when no ``summarizer`` is passed.
This module sits above the engine and the summarizers, so neither imports the other; it also hands
the rooms above it (the adapters) the window table's lookup, :func:`known_window`.
"""

from __future__ import annotations

from compaction.engine.service import CompactionEngine
from compaction.engine.windows import known_window
from compaction.summarizers.template import TemplateSummarizer

__all__ = ["BasicCompactService", "known_window"]


class BasicCompactService(CompactionEngine):
    """The compaction engine; the template summarizer unless ``summarizer`` is given."""

    default_summarizer = TemplateSummarizer
