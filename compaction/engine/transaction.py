"""The region transaction: the one code path every compaction entry point commits through.

In order (docs/architecture.md, "The compaction transaction"): the caller has validated the span and
the lock; this module appends ``compact/start`` and stores it before any await; builds the
summarization input; awaits the summary (the only slow, cancellable step); checks the framed summary
is smaller than what it shadows and passes the fidelity gate; asserts stability (the whole surface
for automatic compaction, the selected span for manual); then stores ``compact/summary`` + the
replacement ``user/message`` + ``compact/end`` in ONE atomic save. Any failure after the start
stores ``compact/end{error}`` and leaves the surface untouched. A conflicting save means another
writer got there first: the start reports busy; a commit re-checks stability on a fresh load and
retries once, and never commits over a bracket that recovery already closed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from compaction.engine.lock import inspect_lock, new_lease
from compaction.engine.meters import Meter
from compaction.engine.selection import Span, leading_task_statement, span_for
from compaction.errors import (
    BusyError,
    CommitError,
    ConcurrencyError,
    EmptySummaryError,
    FidelityError,
    ShrinkError,
    SpanError,
    StoreError,
    SurfaceChangedError,
    error_chain,
)
from compaction.handover.analysis import SpanAnalysis
from compaction.handover.carried import recall_carried
from compaction.handover.completion import complete
from compaction.handover.facts import read, span_facts
from compaction.handover.fidelity import fidelity_problems, measure_fidelity
from compaction.handover.fold import folded_identifiers
from compaction.handover.identifiers import extract
from compaction.sessions.blocks import Message, TextBlock
from compaction.sessions.collector import collector_paused
from compaction.sessions.events import Replace, SessionEvent, UserMessage
from compaction.sessions.session import Session, project
from compaction.sessions.store import SessionStore
from compaction.vocabulary.checkpoint import checkpoint_message, new_compaction_id
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.contract import CompactionResult
from compaction.vocabulary.events import CompactEnd, CompactStart, CompactSummary, ShadowedRange
from compaction.vocabulary.instruction import INSTRUCTION
from compaction.vocabulary.summarizer import Summarizer, SummaryOutput, SummaryRequest

log = logging.getLogger("compaction")

Stability = Literal["whole-surface", "selected-span"]


@dataclass
class Transaction:
    """One compaction attempt over ``span`` of ``session``."""

    session: Session
    store: SessionStore | None
    meter: Meter
    summarizer: Summarizer
    config: BasicConfig
    span: Span
    owner: int | None
    stability: Stability
    strategy: str = "summary"
    on_progress: Callable[[str], None] | None = None  # called with the stage name
    analysis: SpanAnalysis = field(default_factory=SpanAnalysis)
    """What the handover has read of the session (the engine passes the read-ahead's): active while
    the transaction runs, so the summarizer, the completion and the gate share one reading."""

    async def run(self) -> CompactionResult:
        with self.analysis.active():
            return await self._run()

    async def _run(self) -> CompactionResult:
        start = self._start()
        try:
            return await self._summarize_and_commit(start)
        except asyncio.CancelledError as e:
            reason = error_chain(e) if str(e) else "the compaction task was cancelled"
            try:
                self._close(start, f"cancelled: {reason}")
            except Exception as close_error:  # cancellation wins; the unclosed start blocks
                log.error(
                    "compaction %s was cancelled and its compact/start (seq %d) could not be "
                    "closed: %s",
                    start.compaction_id,
                    start.seq,
                    error_chain(close_error),
                )
            raise
        except _ClosedError as closed:
            raise closed.error from None
        except Exception as e:
            self._close(start, error_chain(e))
            raise

    # ------------------------------------------------------------ start (the lock)

    def _start(self) -> CompactStart:
        session = self.session
        event = CompactStart(
            compaction_id=new_compaction_id(),
            turn=self.owner,
            lease=new_lease(self.config.lease_seconds),
            strategy=self.strategy,
        )
        mark = session.mark()
        stamped = session.append(event)
        try:
            self._save()
        except ConcurrencyError as e:
            session.rollback(mark)
            raise BusyError(
                f"compaction: another writer appended to session {session.id} first (seq "
                f"{stamped.seq}); its compaction or its step won the race. Reload and retry."
            ) from e
        except StoreError:
            session.rollback(mark)  # not stored: an in-memory start would block every later attempt
            raise
        assert isinstance(stamped, CompactStart)
        self._progress(f"compact/start seq {stamped.seq} ({len(self.span.seqs)} nodes)", "started")
        return stamped

    # ------------------------------------------------------------ summarize, check, commit

    async def _summarize_and_commit(self, start: CompactStart) -> CompactionResult:
        session = self.session
        captured_nodes = tuple(session.nodes)
        shadowed = self.span.seqs
        prices = self.meter.prices_for(session, shadowed)
        shadowed_tokens = sum(map(prices.__getitem__, shadowed))
        session.preload(shadowed)
        events = list(map(session.event, shadowed))
        shadowed_messages = [m for m in map(project, events) if m is not None]
        self._read_span(shadowed, events, shadowed_messages)
        request = self._request(start.compaction_id, shadowed_messages)
        output = await self.summarizer.summarize(request)
        self._progress(f"summary received from {output.provider}/{output.model}", "summarized")
        text = output.text.strip()
        if not text:
            raise EmptySummaryError(
                f"summarization produced no text summary content ({output.provider}/"
                f"{output.model}, compaction {start.compaction_id})"
            )
        identifiers = extract(shadowed_messages)
        completed = await complete(
            output,
            request,
            shadowed_messages,
            self.summarizer,
            self.config.completion,
            identifiers=identifiers,
            required_ratio=self.config.min_identifier_ratio,
        )
        text = completed.text
        summary = (TextBlock(text),)
        checkpoint = checkpoint_message(start.compaction_id, summary)
        framed_tokens = self.meter.message(checkpoint)
        if framed_tokens >= shadowed_tokens:
            added = completed.record.appendix if completed.record else ""
            raise ShrinkError(
                f"summary is not smaller than the shadowed content ({framed_tokens} estimated "
                f"framed tokens >= {shadowed_tokens})"
                + (
                    f"; {len(added)} of its characters are the completion appendix (what the "
                    "summary missed; completion='off' drops it)"
                    if added
                    else ""
                )
            )
        fidelity = measure_fidelity(text, identifiers, self.config.min_identifier_ratio)
        problems = fidelity_problems(fidelity, self.config.require_sections)
        if problems:
            raise FidelityError("fidelity gate: " + "; ".join(problems))
        self._check_stable(session, captured_nodes)
        summary_event = CompactSummary(
            compaction_id=start.compaction_id,
            summary=summary,
            shadowed_range=ShadowedRange(self.span.start, self.span.end),
            shadowed_seqs=shadowed,
            shadowed_token_count=shadowed_tokens,
            provider=output.provider,
            model=output.model,
            max_tokens=output.max_tokens,
            usage=output.usage,
            fidelity=fidelity,
            shadowed_hashes=dict(zip(map(str, shadowed), map(self.analysis.event_hash, events), strict=True)),
            meter=self.meter.name,
            summary_token_count=framed_tokens,
            chunks=output.chunks,
            request_model=self.summarizer.model or None,
            completion=completed.record,
            header_sent=output.header,
            digest=output.digest,
        )
        return self._commit(start, summary_event, checkpoint, captured_nodes, output)

    def _read_span(
        self, shadowed: tuple[int, ...], events: list[SessionEvent], messages: list[Message]
    ) -> None:
        """What the handover needs of the span, in the analysis before the summarizer asks, with
        the collector paused (what is read all stays alive): the readings the session carries
        (:mod:`compaction.handover.carried`, the fold of its identifiers), then the span's facts,
        which the completion checks (each message the analysis has not read is read: a process
        that just loaded the session; with the completion off, only that)."""
        with collector_paused():
            recall_carried(self.session, self.analysis, shadowed, events)
            self._recall_folded(shadowed, messages)
            if self.config.completion != "off":  # the completion checks the span's facts
                span_facts(messages)
            else:
                for message in messages:
                    read(message)

    def _recall_folded(self, shadowed: tuple[int, ...], messages: list[Message]) -> None:
        """The span's identifiers, when the read-ahead folded them (in this process or in the one
        that saved the session's snapshot), kept in the analysis for these messages: the facts, the
        completion and the gate find them without extracting each message's."""
        folded = folded_identifiers(self.session, shadowed)
        if folded is not None:
            self.analysis.unions.remember(messages, folded)

    def _request(self, compaction_id: str, messages: list[Message]) -> SummaryRequest:
        return build_request(
            self.session,
            self.span.seqs,
            compaction_id,
            self.config.max_tokens,
            keep_first_user=self.config.keep_first_user_message,
            messages=messages,
        )

    def _check_stable(self, session: Session, captured: tuple[int, ...]) -> None:
        if self.stability == "whole-surface":
            if tuple(session.nodes) != captured:
                raise SurfaceChangedError(
                    "compaction: session surface changed during summarization"
                )
            return
        try:
            span = span_for(
                session,
                self.span.start,
                self.span.end,
                keep_first_user=self.config.keep_first_user_message,
            )
        except SpanError as e:
            raise SurfaceChangedError(
                "compaction: the selected span is no longer a valid replacement target"
            ) from e
        if span.seqs != self.span.seqs:
            raise SurfaceChangedError("compaction: the selected span changed during summarization")

    def _commit(
        self,
        start: CompactStart,
        summary: CompactSummary,
        checkpoint: Message,
        captured: tuple[int, ...],
        output: SummaryOutput,
    ) -> CompactionResult:
        for attempt in (1, 2):
            session = self.session
            self._progress("committing", "before-commit")
            mark = session.mark()
            base = len(session)
            events = session.append_all(_commit_events(start, summary, checkpoint, base, self.span))
            try:
                self._save()
            except ConcurrencyError as e:
                session.rollback(mark)
                if attempt == 2:
                    raise CommitError(
                        f"compaction: commit conflicted twice in session {session.id}"
                    ) from e
                self._refresh_for_commit(start, captured)
                continue
            except StoreError as e:
                session.rollback(mark)  # nothing landed: the surface stays as it was
                raise CommitError(
                    f"compaction {start.compaction_id}: the store refused the commit in session "
                    f"{session.id}: {e}"
                ) from e
            self._progress(f"committed compaction {start.compaction_id}", "committed")
            return _result(start, events, summary)
        raise AssertionError("unreachable")

    def _refresh_for_commit(self, start: CompactStart, captured: tuple[int, ...]) -> None:
        """Another writer appended while we summarized: reload, and commit only if still safe."""
        assert self.store is not None
        fresh = self.store.get(self.session.id)
        lock = inspect_lock(fresh)
        if lock.start_seq != start.seq:
            self.session.adopt(fresh)
            raise _ClosedError(
                CommitError(
                    f"compaction {start.compaction_id}: its compact/start (seq {start.seq}) was closed "
                    "by another process (lease expired and recovery released it, or a later "
                    "session/resume); nothing was committed"
                )
            )
        self.session.adopt(fresh)
        self._check_stable(fresh, captured)

    # ------------------------------------------------------------ failure

    def _close(self, start: CompactStart, error: str) -> None:
        session = self.session
        end = CompactEnd(compaction_id=start.compaction_id, turn=start.turn, error=error)
        for attempt in (1, 2):
            if inspect_lock(session).start_seq != start.seq:
                return  # already closed by someone else
            mark = session.mark()
            session.append(end)
            try:
                self._save()
                log.warning("compaction %s failed and was closed: %s", start.compaction_id, error)
                return
            except ConcurrencyError:
                session.rollback(mark)
                if attempt == 2 or self.store is None:
                    raise
                session.adopt(self.store.get(session.id))
            except StoreError:
                session.rollback(mark)  # the start stays unmatched in the store: keep it so here
                raise

    def _save(self) -> None:
        if self.store is not None:
            self.store.save(self.session)

    def _progress(self, message: str, stage: str) -> None:
        """Report a stage: started, summarized, before-commit, committed (crash tests hook here)."""
        log.info("%s", message)
        if self.on_progress is not None:
            self.on_progress(stage)


class _ClosedError(Exception):
    """Internal: the bracket is already closed by someone else; surface the wrapped error."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        super().__init__(str(error))


def build_request(
    session: Session,
    shadowed: tuple[int, ...],
    compaction_id: str,
    max_tokens: int,
    *,
    keep_first_user: bool = True,
    messages: Sequence[Message] | None = None,
) -> SummaryRequest:
    """The summarization request: header system/tools, the shadowed messages (after the
    protected task statement, which the summarizer still sees), then the instruction.
    ``messages``: the shadowed seqs' messages when the caller has them (else projected here)."""
    header = session.latest_header()
    system = header.system if header is not None else None
    tools = header.tools if header is not None else ()
    lead: list[Message] = []
    first = leading_task_statement(session, shadowed) if keep_first_user else None
    if first is not None:
        task = project(session.event(first))
        if task is not None:
            lead.append(task)
    if messages is None:
        messages = [m for m in (project(session.event(s)) for s in shadowed) if m is not None]
    return SummaryRequest(
        session_id=str(session.id),
        compaction_id=compaction_id,
        system=system,
        tools=tools,
        messages=(*lead, *messages),
        instruction=INSTRUCTION,
        max_tokens=max_tokens,
    )


def _commit_events(
    start: CompactStart, summary: CompactSummary, checkpoint: Message, base: int, span: Span
) -> list[SessionEvent]:
    return [
        summary,
        UserMessage(
            message=checkpoint,
            surface_op=Replace(span.start, span.end),
            source_event_seqs=(start.seq, base, *span.seqs),
        ),
        CompactEnd(compaction_id=start.compaction_id, turn=start.turn),
    ]


def _result(
    start: CompactStart, events: list[SessionEvent], summary: CompactSummary
) -> CompactionResult:
    summary_event, replacement, end = events
    return CompactionResult(
        compaction_id=start.compaction_id,
        start_seq=start.seq,
        summary_seq=summary_event.seq,
        replacement_seq=replacement.seq,
        end_seq=end.seq,
        summary=summary.summary,
        shadowed_range=summary.shadowed_range,
        shadowed_seqs=summary.shadowed_seqs,
        shadowed_token_count=summary.shadowed_token_count,
        summary_token_count=summary.summary_token_count,
    )
