"""Overflow recovery (docs/operations.md): when a model call fails because the request does not fit,
compact with no retained budget beyond the newest unit and retry the call, once per configured retry,
only when the surface really changed. Cancellation always wins; when recovery cannot help, the original
error surfaces unchanged (the hook returns False and the loop re-raises it).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import TYPE_CHECKING

from compaction.errors import ContextLengthError
from compaction.sessions.session import Session
from compaction.vocabulary.contract import CompactService

if TYPE_CHECKING:
    from compaction.sessions.loop import StepContext

log = logging.getLogger("compaction")

OVERFLOW_CODES = frozenset({"context_length", "CONTEXT_WINDOW_EXCEEDED", "context_length_exceeded"})


def is_context_overflow(error: BaseException) -> bool:
    """A context-length error as the summarizers and model clients classify it."""
    return isinstance(error, ContextLengthError) or getattr(error, "code", None) in OVERFLOW_CODES


class OverflowRecovery:
    """An ``on_model_error`` hook for :class:`compaction.sessions.loop.AgentLoop`.

    ``max_overflow_retries`` defaults to the service's ``BasicConfig.max_overflow_retries`` (1 for a
    service without one). The counter is per turn: it resets when a new turn starts (the agent was
    idle in between) and when an assistant message lands.
    """

    def __init__(self, service: CompactService, max_overflow_retries: int | None = None) -> None:
        self.service = service
        if max_overflow_retries is None:
            config = getattr(service, "config", None)
            max_overflow_retries = getattr(config, "max_overflow_retries", 1)
        self.max_overflow_retries: int = max_overflow_retries
        self._retries: weakref.WeakKeyDictionary[Session, tuple[tuple[int, int | None], int]] = (
            weakref.WeakKeyDictionary()
        )

    @staticmethod
    def _anchor(context: StepContext) -> tuple[int, int | None]:
        return context.turn, context.session.last_of("assistant/message")

    def _count(self, context: StepContext) -> int:
        anchor, count = self._retries.get(context.session, ((0, None), 0))
        if anchor != self._anchor(context):
            return 0  # a new turn, or an assistant message landed since: the counter resets
        return count

    async def __call__(self, context: StepContext, error: Exception) -> bool:
        session = context.session
        if not is_context_overflow(error):
            return False
        count = self._count(context)
        if count >= self.max_overflow_retries:
            log.warning("context overflow: %d recovery attempts used; preserving the original error", count)
            return False
        generation = session.surface.generation
        try:
            result = await self.service.compact_if_needed(
                session, store=context.store, trigger="context-overflow"
            )
        except asyncio.CancelledError:
            raise
        except Exception as e:
            if session.surface.generation > generation:
                log.warning(
                    "context-overflow compaction failed after durable surface progress: %s; "
                    "retrying from the replacement surface",
                    e,
                )
                self._retries[session] = (self._anchor(context), count + 1)
                return True
            log.warning("context-overflow compaction failed: %s; preserving the original request error", e)
            return False
        if session.surface.generation <= generation:
            return False
        if result is not None:
            log.info("compaction (context overflow recovery): %s", result.describe())
        self._retries[session] = (self._anchor(context), count + 1)
        return True
