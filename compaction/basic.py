"""BasicCompactService: token pressure, the retention walk, the lock, summarize, commit.

Automatic compaction runs as a ``pre_step`` hook of the reference loop, before every step (so a
runaway turn compacts its own early closed steps); its errors are contained and logged, and the turn
continues. Manual compaction (:meth:`compact_now`) runs between turns and keeps only the newest unit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from compaction.checkpoint import is_checkpoint
from compaction.config import BasicConfig
from compaction.contract import CompactionResult, CompactService, Trigger
from compaction.errors import BusyError, CompactionConfigError, ConvergenceError, SpanError
from compaction.lock import busy_message, inspect_lock
from compaction.meters import HeuristicMeter, Meter
from compaction.selection import Span, head_before_task, select_span, span_for
from compaction.sessions.session import Session, project
from compaction.sessions.store import SessionStore
from compaction.strategies.prune import PruneConfig, prune_session
from compaction.summarizers.base import Summarizer
from compaction.summarizers.template import TemplateSummarizer
from compaction.transaction import Stability, Transaction

if TYPE_CHECKING:
    from compaction.sessions.loop import StepContext

log = logging.getLogger("compaction")


class BasicCompactService(CompactService):
    def __init__(
        self,
        config: BasicConfig | None = None,
        *,
        summarizer: Summarizer | None = None,
        meter: Meter | None = None,
        on_progress: Callable[[str], None] | None = None,
        pruner: PruneConfig | None = None,
    ) -> None:
        self.config = config or BasicConfig()
        self.pruner = pruner
        self.summarizer = summarizer or TemplateSummarizer()
        self.meter = meter or HeuristicMeter()
        self.on_progress = on_progress
        self._warned_targets: set[str] = set()

    # ------------------------------------------------------------ pressure

    def context_window(self, session: Session) -> int:
        if self.config.context_window is not None:
            return self.config.context_window
        header = session.latest_header()
        if header is not None and header.context_window:
            return header.context_window
        target = f"{header.provider}/{header.model}" if header is not None else "this session"
        raise CompactionConfigError(
            f"compaction-basic: no context capacity for {target}; configure context_window "
            "(BasicConfig.context_window or --window) or record it on request/header"
        )

    async def compact_if_needed(
        self, session: Session, *, store: SessionStore | None = None, trigger: Trigger = "pressure"
    ) -> CompactionResult | None:
        if trigger == "context-overflow":
            return await self._overflow(session, store)
        threshold, retain = self.config.budget(self.context_window(session))
        lock = inspect_lock(session)
        if lock.live:
            raise BusyError(busy_message("automatic pressure compaction", session, lock))
        measurement = self.meter.measure(session)
        if measurement.total_tokens < threshold:
            return None
        if self.pruner is not None and self._prune(session, store):
            measurement = self.meter.measure(session)
            if measurement.total_tokens < threshold:
                return None
        attempts = 0
        for _ in range(self.config.compaction_retries + 1):
            span = select_span(
                session, self.meter, retain, keep_first_user=self.config.keep_first_user_message
            )
            if span is None:
                if attempts == 0:
                    return None
                break  # compacted, still above the threshold, and nothing left to select
            attempts += 1
            result = await self._transaction(session, store, span, manual=False)
            measurement = self.meter.measure(session)
            if measurement.total_tokens < threshold:
                return result
        raise ConvergenceError(
            f"compaction still above threshold after {attempts} "
            f"compaction attempts ({measurement.total_tokens} estimated tokens >= threshold "
            f"{threshold}) in session {session.id}"
        )

    async def compact_to_threshold(
        self, session: Session, *, store: SessionStore | None = None
    ) -> list[CompactionResult]:
        """Offline compaction between turns (the CLI): standalone brackets until the request total
        is under the threshold or nothing more can be compacted."""
        threshold, retain = self.config.budget(self.context_window(session))
        results: list[CompactionResult] = []
        while self.meter.measure(session).total_tokens >= threshold:
            span = select_span(
                session, self.meter, retain, keep_first_user=self.config.keep_first_user_message
            )
            if span is None or _lone_checkpoint(session, span):
                # Re-summarizing a checkpoint alone adds drift, not room; what precedes the task
                # statement (an injected demonstration, say) is the one place left to compact.
                span = head_before_task(session, keep_first_user=self.config.keep_first_user_message)
            if span is None or _lone_checkpoint(session, span):
                break
            results.append(await self._transaction(session, store, span, manual=True))
        return results

    def _prune(self, session: Session, store: SessionStore | None) -> bool:
        """The cheaper operation first (seed 002): prune oversized tool results."""
        assert self.pruner is not None
        report = prune_session(session, self.meter, self.pruner, store=store)
        if report.pruned:
            log.info(
                "pruned %d tool results (%d chars removed)", len(report.pruned), report.chars_removed
            )
        return bool(report.pruned)

    async def _overflow(self, session: Session, store: SessionStore | None) -> CompactionResult | None:
        if self.pruner is not None:
            self._prune(session, store)
        span = select_span(session, self.meter, 0, keep_first_user=self.config.keep_first_user_message)
        if span is None:
            return None
        return await self._transaction(session, store, span, manual=session.open_turn is None)

    # ------------------------------------------------------------ explicit and manual

    async def compact_region(
        self,
        session: Session,
        start: int,
        end: int,
        *,
        store: SessionStore | None = None,
        manual: bool = False,
    ) -> CompactionResult:
        span = span_for(session, start, end, keep_first_user=self.config.keep_first_user_message)
        return await self._transaction(session, store, span, manual=manual)

    async def compact_now(
        self, session: Session, *, store: SessionStore | None = None
    ) -> CompactionResult | None:
        lock = inspect_lock(session)
        if lock.live:
            raise BusyError(busy_message("compaction", session, lock))
        if session.open_turn is not None:
            raise BusyError(
                f"manual compaction: the session already has an open turn ({session.open_turn}) "
                f"in session {session.id}; compact between turns"
            )
        span = select_span(session, self.meter, 0, keep_first_user=self.config.keep_first_user_message)
        if span is None:
            return None
        return await self._transaction(session, store, span, manual=True)

    async def _transaction(
        self, session: Session, store: SessionStore | None, span: Span, *, manual: bool
    ) -> CompactionResult:
        lock = inspect_lock(session)
        if lock.live:
            raise BusyError(busy_message("compaction", session, lock))
        if manual and session.open_turn is not None:
            raise BusyError(
                f"manual compaction: the session already has an open turn ({session.open_turn})"
            )
        if not manual and session.open_turn is None:
            raise SpanError(
                "compactRegion: no open turn — automatic compaction events must be enclosed in a turn"
            )
        stability: Stability = "selected-span" if manual else "whole-surface"
        transaction = Transaction(
            session=session,
            store=store,
            meter=self.meter,
            summarizer=self.summarizer,
            config=self.config,
            span=span,
            owner=None if manual else session.open_turn,
            stability=stability,
            on_progress=self.on_progress,
        )
        result = await transaction.run()
        log.info("compaction (%s): %s", "manual" if manual else "step pressure", result.describe())
        return result

    # ------------------------------------------------------------ the loop seam

    async def pre_step(self, context: StepContext) -> None:
        """The automatic pressure hook: errors are contained so the turn continues."""
        if not self.config.auto:
            return
        try:
            await self.compact_if_needed(context.session, store=context.store)
        except CompactionConfigError as e:
            key = str(e)
            if key not in self._warned_targets:
                self._warned_targets.add(key)
                log.warning("step compaction failed: %s; continuing the turn", e)
        except Exception as e:  # contained by design (spec §d.18)
            log.warning("step compaction failed: %s; continuing the turn", e)


def _lone_checkpoint(session: Session, span: Span) -> bool:
    """The span is one earlier checkpoint and nothing else."""
    if len(span.seqs) != 1:
        return False
    message = project(session.event(span.seqs[0]))
    return message is not None and is_checkpoint(message)
