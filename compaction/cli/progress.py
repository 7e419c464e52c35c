"""A line on stderr while a model summarizes, so a long local generation is not silence.

:class:`ShowProgress` wraps the summarizer ``compact`` opened: each summarization request says, as
it starts, which model is summarizing which compaction and that Ctrl-C stops it; on a terminal the
line stays live, with the seconds elapsed, until the model answers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from rich.console import Console

from compaction.vocabulary.summarizer import Summarizer, SummaryOutput, SummaryRequest

TICK = 1.0
"""Seconds between updates of the live line (terminal only)."""


class ShowProgress(Summarizer):
    """``inner`` with a progress line on ``err`` for every request (see the module)."""

    def __init__(self, inner: Summarizer, err: Console) -> None:
        self.inner = inner
        self.err = err
        self.provider = inner.provider
        self.model = inner.model
        self.requests = 0

    def line(self, request: SummaryRequest, seconds: float | None = None) -> str:
        count = len(request.messages)
        elapsed = "" if seconds is None else f", {seconds:.0f} s"
        return (
            f"summarizing with {self.provider}/{self.model} (request {self.requests}, compaction "
            f"{request.compaction_id[:8]}, {count} message{'s' if count != 1 else ''}{elapsed}); "
            "Ctrl-C stops it"
        )

    async def summarize(self, request: SummaryRequest) -> SummaryOutput:
        self.requests += 1
        if not self.err.is_terminal:
            self.err.print(self.line(request), markup=False, soft_wrap=True)
            return await self.inner.summarize(request)
        started = time.monotonic()
        with self.err.status(self.line(request, 0)) as status:
            ticker = asyncio.create_task(self._tick(request, status.update, started))
            try:
                return await self.inner.summarize(request)
            finally:
                ticker.cancel()

    async def _tick(self, request: SummaryRequest, update: Callable[[str], None], started: float) -> None:
        while True:
            await asyncio.sleep(TICK)
            update(self.line(request, time.monotonic() - started))

    async def aclose(self) -> None:
        await self.inner.aclose()
