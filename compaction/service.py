"""The composition root of the compaction service: the engine with the template summarizer.

:class:`~compaction.engine.service.CompactionEngine` (when and where to cut, how to commit) is
given its summarizer and names none; :class:`BasicCompactService` is the engine whose default is
:class:`~compaction.summarizers.template.TemplateSummarizer`, used when no ``summarizer`` is passed.
This module sits above the engine and the summarizers, so neither imports the other; it also hands
the rooms above it (the adapters) the window table's lookup, :func:`known_window`.
"""

from __future__ import annotations

from compaction.engine.meters import meter_named
from compaction.engine.service import CompactionEngine
from compaction.engine.settings import Settings, default_settings_path, load_settings
from compaction.engine.windows import known_window
from compaction.sessions.session import Session
from compaction.summarizers.template import TemplateSummarizer
from compaction.vocabulary.summarizer import Summarizer

__all__ = [
    "BasicCompactService",
    "Settings",
    "default_settings_path",
    "known_window",
    "load_settings",
    "service_for",
]


class BasicCompactService(CompactionEngine):
    """The compaction engine; the template summarizer unless ``summarizer`` is given."""

    default_summarizer = TemplateSummarizer


def service_for(
    settings: Settings, session: Session, *, summarizer: Summarizer | None = None
) -> BasicCompactService:
    """The service for ``session`` under a loaded ``compaction.toml``: the policy of the model
    its latest ``request/header`` names, the file's meter (the call an adapter makes per session;
    one process serving several models gets each model's thresholds)."""
    return BasicCompactService(
        settings.config_for(session),
        summarizer=summarizer,
        meter=meter_named(settings.meter),
        pruner=settings.pruner,
    )
