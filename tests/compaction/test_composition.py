"""The engine is given its summarizer; the composition root gives the template by default."""

from __future__ import annotations

import pytest

from compaction.engine.service import CompactionEngine
from compaction.errors import CompactionConfigError
from compaction.service import BasicCompactService
from compaction.summarizers.template import TemplateSummarizer


class _Fixed:
    """A summarizer of our own: the engine takes anything that meets the protocol."""

    name = "fixed"

    async def summarize(self, request: object) -> object:  # pragma: no cover - never called here
        raise NotImplementedError


def test_the_engine_names_no_summarizer_of_its_own() -> None:
    with pytest.raises(CompactionConfigError, match="no summarizer; pass summarizer="):
        CompactionEngine()


def test_the_composition_root_defaults_to_the_template() -> None:
    assert isinstance(BasicCompactService().summarizer, TemplateSummarizer)


def test_a_given_summarizer_is_used_by_both() -> None:
    mine = _Fixed()
    assert CompactionEngine(summarizer=mine).summarizer is mine  # type: ignore[arg-type]
    assert BasicCompactService(summarizer=mine).summarizer is mine  # type: ignore[arg-type]
