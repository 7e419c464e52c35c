"""The compaction engine: token pressure, the retention walk, the lock, summarize, commit.

The engine is given its summarizer (anything that meets
:class:`~compaction.vocabulary.summarizer.Summarizer`); it imports none.
:class:`compaction.service.BasicCompactService` is this engine with the template summarizer by
default, composed above both rooms.

Automatic compaction runs as a ``pre_step`` hook of the reference loop, before every step (so a
runaway turn compacts its own early closed steps); its errors are contained and logged, and the turn
continues. Manual compaction (:meth:`compact_now`) runs between turns and keeps only the newest unit.
Offline compaction (:meth:`compact_to_fit`, the CLI's ``compact``) compacts until the request total
is under the threshold and reports where it ended and why
(:class:`~compaction.vocabulary.contract.FitReport`).

Budgets are in request tokens as the provider counts them: the meter's reading carries the ratio
its prices were calibrated to (:class:`~compaction.engine.meters.Calibration`), and the retained tail is
converted to the meter's units with it before the retention walk.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from compaction.engine.floor import refuse_too_small
from compaction.engine.lock import LockState, UnreleasedLeases, busy_message, inspect_lock
from compaction.engine.meters import HeuristicMeter, Measurement, Meter
from compaction.engine.prune import PruneConfig, prune_session
from compaction.engine.selection import Span, head_before_task, select_span, span_for
from compaction.engine.transaction import CLOSE_BUDGET_SECONDS, Stability, Transaction
from compaction.engine.windows import DEFAULT_WINDOWS, WindowTable, header_window, model_name
from compaction.errors import (
    BusyError,
    CompactionConfigError,
    ConvergenceError,
    EventCompactionError,
    SpanError,
)
from compaction.handover.analysis import ANALYSIS_BYTES
from compaction.handover.readahead import READ_AHEAD_FROM, ReadAhead
from compaction.sessions.session import Session, project
from compaction.sessions.store import SessionStore
from compaction.vocabulary.checkpoint import is_checkpoint
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.contract import (
    CompactionResult,
    CompactService,
    FitReport,
    FitStatus,
    Shortfall,
    Trigger,
)
from compaction.vocabulary.summarizer import Summarizer

if TYPE_CHECKING:
    from compaction.sessions.loop import StepContext

log = logging.getLogger("compaction")


class CompactionEngine(CompactService):
    default_summarizer: ClassVar[Callable[[], Summarizer] | None] = None
    """What a composition subclass gives the engine when no ``summarizer`` is passed; the engine
    itself names none (:class:`compaction.service.BasicCompactService` names the template)."""

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
        """``analysis_bytes``: the bound, in approximate bytes, of what the engine keeps of each
        session it reads ahead or compacts (:class:`~compaction.handover.analysis.SpanAnalysis`,
        held while the session lives); default
        :data:`~compaction.handover.analysis.ANALYSIS_BYTES`."""
        self.config = config or BasicConfig()
        self.windows = windows or DEFAULT_WINDOWS
        self.pruner = pruner
        self.summarizer = summarizer if summarizer is not None else self._default_summarizer()
        self.meter = meter or HeuristicMeter()
        self.on_progress = on_progress
        self.read_ahead = ReadAhead(ANALYSIS_BYTES if analysis_bytes is None else analysis_bytes)
        self._warned_targets: set[str] = set()
        self.unreleased = UnreleasedLeases()
        """This engine's compactions whose ``compact/end`` could not be stored: its next
        compaction of such a session takes the lease over (:mod:`compaction.engine.lock`)."""
        self.close_budget = CLOSE_BUDGET_SECONDS
        """Seconds a failed compaction retries storing its ``compact/end`` before it reports the
        lock held (:class:`~compaction.errors.LockHeldError`)."""

    def _default_summarizer(self) -> Summarizer:
        make = type(self).default_summarizer
        if make is None:
            raise CompactionConfigError(
                f"{type(self).__name__}: no summarizer; pass summarizer= (any Summarizer), or use "
                "compaction.service.BasicCompactService, whose default is the template summarizer"
            )
        return make()

    def observe(self, session: Session) -> int:
        """Gather what a compaction of ``session`` will need, for the events since the last call:
        each new message read for the handover facts and the identifiers, each surface event
        hashed (kept in the session's analysis, :mod:`compaction.handover.readahead`), each node
        priced. The pressure check does it once the request is past half the threshold; call it
        after appending, e.g. off the hot path, to make the next compaction's own work a pass over
        what is already known. Returns the messages read."""
        count = self.read_ahead.observe(session)
        self.meter.measure(session)
        return count

    # ------------------------------------------------------------ pressure

    def context_window(self, session: Session) -> int:
        """``config.context_window``, else the latest header's, else the known window of its model
        (:mod:`compaction.engine.windows`, ``self.windows``)."""
        return self.window_and_source(session)[0]

    def window_and_source(self, session: Session) -> tuple[int, str]:
        """:meth:`context_window` and where it comes from (``--window``, the header, the table),
        for a report to name the window it assumed."""
        if self.config.context_window is not None:
            return self.config.context_window, "configured"
        header = session.latest_header()
        found = header_window(header, self.windows)
        if found is not None:
            return found
        target = model_name(header) if header is not None else "this session"
        raise CompactionConfigError(
            f"no context window known for {target}: the session records none and the model is not "
            "one whose window is known; give the window in tokens with --window N on the command "
            "line, context_window=N in code, or context_window in a [policies] entry of "
            "compaction.toml"
        )

    def _retain_units(self, retain: int, measurement: Measurement) -> int:
        """The retained tail, in request tokens, as the meter's units (the retention walk's)."""
        return math.ceil(retain / measurement.ratio) if retain else 0

    async def compact_if_needed(
        self, session: Session, *, store: SessionStore | None = None, trigger: Trigger = "pressure"
    ) -> CompactionResult | None:
        if trigger == "context-overflow":
            return await self._overflow(session, store)
        if self.config.context_window is None and session.latest_header() is None:
            return None  # nothing routed yet: no window, no pressure (the reference does the same)
        threshold, retain = self.config.budget(self.context_window(session))
        self._lock_free("automatic pressure compaction", session)
        measurement = self.meter.measure(session)
        if measurement.total_tokens >= READ_AHEAD_FROM * threshold:
            self.read_ahead.observe(session)
        if measurement.total_tokens < threshold:
            return None
        if self.pruner is not None and self._prune(session, store):
            measurement = self.meter.measure(session)
            if measurement.total_tokens < threshold:
                return None
        attempts = 0
        for _ in range(self.config.compaction_retries + 1):
            span = select_span(
                session,
                self.meter,
                self._retain_units(retain, measurement),
                keep_first_user=self.config.keep_first_user_message,
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
        """:meth:`compact_to_fit`, returning only the compactions that committed (a failed later
        attempt is logged, not raised, once one has committed)."""
        report = await self.compact_to_fit(session, store=store)
        if report.failure is not None:
            log.warning(
                "compaction stopped after %d committed compactions: %s",
                len(report.compactions),
                report.failure,
            )
        return list(report.compactions)

    async def compact_to_fit(self, session: Session, *, store: SessionStore | None = None) -> FitReport:
        """Offline compaction between turns (the CLI): standalone brackets until the request total
        is under the threshold or nothing more can be compacted, then where it ended and why.

        The retained tail is kept while that suffices; when it does not and ``retain_tokens`` was
        not set explicitly, compaction goes on keeping only the newest unit (as :meth:`compact_now`).
        A failure after at least one compaction committed is reported in ``failure`` (the committed
        ones stand); one before any raises. A window, or a threshold, not above the fixed overhead is
        refused before anything is written: no compaction could bring the request under it.
        """
        window = self.context_window(session)
        threshold, retain = self.config.budget(window)
        start = self.meter.measure(session)
        _refuse_below_overhead(session, window, self.config.threshold_ratio, start)
        results: list[CompactionResult] = []
        failure: EventCompactionError | None = None
        budgets = [retain] if self.config.retain_tokens is not None or not retain else [retain, 0]
        kept = retain
        try:
            for kept in budgets:
                while (reading := self.meter.measure(session)).total_tokens >= threshold:
                    span = self._offline_span(session, self._retain_units(kept, reading))
                    if span is None:
                        break
                    results.append(await self._transaction(session, store, span, manual=True))
                else:
                    break  # under the threshold
        except EventCompactionError as e:
            if not results:
                raise
            failure = e
        return self.fit_report(
            session,
            window,
            compactions=results,
            tokens_before=start.total_tokens,
            retained=kept,
            failure=failure,
        )

    def _offline_span(self, session: Session, retain_units: int) -> Span | None:
        keep_first = self.config.keep_first_user_message
        span = select_span(session, self.meter, retain_units, keep_first_user=keep_first)
        if span is None or _lone_checkpoint(session, span):
            # Re-summarizing a checkpoint alone adds drift, not room; what precedes the task
            # statement (an injected demonstration, say) is the one place left to compact.
            span = head_before_task(session, keep_first_user=keep_first)
        if span is None or _lone_checkpoint(session, span):
            return None
        return span

    def fit_report(
        self,
        session: Session,
        window: int,
        *,
        compactions: list[CompactionResult] | tuple[CompactionResult, ...] = (),
        tokens_before: int | None = None,
        retained: int = 0,
        failure: EventCompactionError | None = None,
    ) -> FitReport:
        """Where ``session``'s request total stands against ``window`` and its threshold, and, when
        above the threshold, why (``retained``: the tail, in request tokens, compaction kept)."""
        threshold, _ = self.config.budget(window)
        reading = self.meter.measure(session)
        total = reading.total_tokens
        status: FitStatus = (
            "under_threshold"
            if total < threshold
            else "above_threshold"
            if total < window
            else "above_window"
        )
        shortfall = None
        if status != "under_threshold":
            above_window = status == "above_window"
            shortfall = _shortfall(
                session,
                self.meter,
                reading,
                threshold=threshold,
                limit_text=(
                    f"the context window ({window:,})"
                    if above_window
                    else f"the threshold ({threshold:,} = {self.config.threshold_ratio:g} x {window:,})"
                ),
                retained=retained,
                failure=failure,
                committed=len(compactions),
            )
        return FitReport(
            compactions=tuple(compactions),
            window=window,
            threshold=threshold,
            tokens_before=total if tokens_before is None else tokens_before,
            tokens_after=total,
            overhead_tokens=reading.overhead_tokens,
            ratio=reading.ratio,
            status=status,
            shortfall=shortfall,
            failure=failure,
        )

    def _prune(self, session: Session, store: SessionStore | None) -> bool:
        """The cheapest operation first (docs/operations.md): prune oversized tool results."""
        assert self.pruner is not None
        report = prune_session(session, self.meter, self.pruner, store=store)
        if report.pruned:
            log.info("pruned %d tool results (%d chars removed)", len(report.pruned), report.chars_removed)
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
        self,
        session: Session,
        *,
        store: SessionStore | None = None,
        source_command_id: str | None = None,
        focus: str | None = None,
    ) -> CompactionResult | None:
        self._lock_free("compaction", session)
        if session.open_turn is not None:
            raise BusyError(
                f"manual compaction: the session already has an open turn ({session.open_turn}) "
                f"in session {session.id}; compact between turns"
            )
        span = select_span(session, self.meter, 0, keep_first_user=self.config.keep_first_user_message)
        if span is None:
            return None
        return await self._transaction(
            session, store, span, manual=True, source_command_id=source_command_id, focus=focus
        )

    async def _transaction(
        self,
        session: Session,
        store: SessionStore | None,
        span: Span,
        *,
        manual: bool,
        source_command_id: str | None = None,
        focus: str | None = None,
    ) -> CompactionResult:
        lock = self._lock_free("compaction", session)
        if manual and session.open_turn is not None:
            raise BusyError(f"manual compaction: the session already has an open turn ({session.open_turn})")
        if not manual and session.open_turn is None:
            raise SpanError(
                "compactRegion: no open turn — automatic compaction events must be enclosed in a turn"
            )
        refuse_too_small(session, span, self.meter, self.config, source_command_id)
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
            source_command_id=source_command_id,
            focus=focus,
            on_progress=self.on_progress,
            analysis=self.read_ahead.analysis(session),
            unreleased=self.unreleased,
            takeover=self.unreleased.takes_over(session, lock),
            close_budget=self.close_budget,
        )
        result = await transaction.run()
        log.info("compaction (%s): %s", "manual" if manual else "step pressure", result.describe())
        return result

    def _lock_free(self, stage: str, session: Session) -> LockState:
        """The session's lock, when free or held only by this engine's own failed compaction
        (which the next transaction takes over); else :class:`BusyError`."""
        lock = inspect_lock(session)
        if lock.live and self.unreleased.takes_over(session, lock) is None:
            raise BusyError(busy_message(stage, session, lock))
        return lock

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
        except Exception as e:  # contained by design: a failed compaction never ends the turn
            log.warning("step compaction failed: %s; continuing the turn", e)


def _lone_checkpoint(session: Session, span: Span) -> bool:
    """The span is one earlier checkpoint and nothing else."""
    if len(span.seqs) != 1:
        return False
    message = project(session.event(span.seqs[0]))
    return message is not None and is_checkpoint(message)


def overhead_source(session: Session, reading: Measurement) -> str:
    """Where a reading's fixed overhead was measured, for messages."""
    calibration = reading.calibration
    if calibration is not None:
        return (
            f"measured on the provider's count of the request at seq {calibration.first_seq}: "
            "system prompt, tools and what the harness sends beyond the logged messages"
        )
    header = session.header_seq()
    if header is None:
        return "no request/header and no provider usage: nothing is sent beyond the messages"
    return f"the system prompt and tool schemas of request/header seq {header}, at the meter's price"


def _refuse_below_overhead(session: Session, window: int, ratio: float, reading: Measurement) -> None:
    overhead = reading.overhead_tokens
    threshold = math.floor(window * ratio)
    if window <= overhead:
        raise CompactionConfigError(
            f"context window {window:,} is not above the fixed overhead of session {session.id}'s "
            f"requests: {overhead:,} tokens ({overhead_source(session, reading)}); "
            "no compaction can fit it. Use a window above the overhead: --window N on the command "
            "line, context_window=N in code."
        )
    if threshold <= overhead:
        needed = math.ceil((overhead + 1) / ratio)
        while math.floor(needed * ratio) <= overhead:
            needed += 1
        raise CompactionConfigError(
            f"the threshold {threshold:,} ({ratio:g} x the context window {window:,}) is not above the fixed "
            f"overhead of session {session.id}'s requests: {overhead:,} tokens "
            f"({overhead_source(session, reading)}); no compaction can bring the request under "
            f"it, so nothing was compacted. Use a window of at least {needed:,} or a higher "
            "threshold ratio: --window N and --threshold R on the command line, context_window and "
            "threshold_ratio in code."
        )


def surface_units(session: Session) -> list[tuple[int, ...]]:
    """The surface cut into units: runs of nodes whose tool-pairing balance returns to zero (a
    closed step with its results, or one standalone message); an open step ends the last one."""
    nodes = session.nodes
    cuts = session.surface.cuts()
    units: list[tuple[int, ...]] = []
    start = 0
    for index in range(len(nodes)):
        if cuts[index + 1] == 0:
            units.append(tuple(nodes[start : index + 1]))
            start = index + 1
    if start < len(nodes):
        units.append(tuple(nodes[start:]))
    return units


def _shortfall(
    session: Session,
    meter: Meter,
    reading: Measurement,
    *,
    threshold: int,
    limit_text: str,
    retained: int,
    failure: EventCompactionError | None,
    committed: int,
) -> Shortfall:
    """The first cause that holds: a failed attempt, the overhead alone at the threshold, the
    retained tail (an explicit ``retain_tokens``), else what is left and cannot be compacted."""
    total = reading.total_tokens
    overhead = reading.overhead_tokens
    above = f"{total:,} tokens, still above {limit_text}"
    if failure is not None:
        return Shortfall(
            "attempt_failed",
            f"{above}: a further compaction failed "
            f"({type(failure).__name__}: {failure}); the {committed} committed before it stand",
            total,
        )
    if overhead >= threshold:
        return Shortfall(
            "fixed_overhead",
            f"{above}: the fixed overhead alone is {overhead:,} tokens, at or above the threshold "
            f"{threshold:,} ({overhead_source(session, reading)})",
            overhead,
        )
    units = surface_units(session)
    priced = [(reading.surface_price(sum(meter.node_price(session, s) for s in u)), u) for u in units]
    if retained:
        walked = math.ceil(retained / reading.ratio)
        tail: list[int] = []
        weight = 0
        for seq in reversed(session.nodes):
            tail.insert(0, seq)
            weight += meter.node_price(session, seq)
            if weight >= walked:
                break
        tokens = reading.surface_price(weight)
        return Shortfall(
            "retained_tail",
            f"{above}: the newest {len(tail)} surface nodes "
            f"(~{tokens:,} tokens) are kept verbatim by retain_tokens ({retained:,}; --retain-tokens)"
            f" beside the fixed overhead of {overhead:,}; lower it to compact them",
            tokens,
            tuple(tail),
        )
    tokens, unit = max(priced, key=lambda p: p[0]) if priced else (0, ())
    return Shortfall(
        "unsplittable_unit",
        f"{above}: nothing left can be compacted; the largest unit "
        f"is {_role(session, unit, units)} (seqs {unit[0] if unit else '-'}.."
        f"{unit[-1] if unit else '-'}, ~{tokens:,} tokens), beside the fixed overhead of "
        f"{overhead:,} and {len(units) - 1} other units",
        tokens,
        unit,
    )


def _role(session: Session, unit: tuple[int, ...], units: list[tuple[int, ...]]) -> str:
    if session.first_user_seq is not None and session.first_user_seq in unit:
        return "the task statement (the first user message, kept structurally)"
    if len(unit) == 1:
        message = project(session.event(unit[0]))
        if message is not None and is_checkpoint(message):
            return "a checkpoint (a lone checkpoint is not summarized again)"
    if units and unit == units[-1]:
        return "the newest unit (always kept: compaction never splits or shadows it)"
    return "one step with its tool results"
