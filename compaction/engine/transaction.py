"""The region transaction: the one code path every compaction entry point commits through.

In order (docs/architecture.md, "The compaction transaction"): the caller has validated the span and
the lock; this module appends ``compact/start`` and stores it before any await; builds the
summarization input; awaits the summary (the only slow, cancellable step); checks the framed summary
is smaller than what it shadows and passes the fidelity gate; asserts stability (the whole surface
for automatic compaction, the selected span for manual); then stores ``compact/summary`` + the
replacement ``user/message`` + ``compact/end`` in ONE atomic save. Any failure after the start
stores ``compact/end{error}`` and leaves the surface untouched; that end is retried with backoff
for :data:`CLOSE_BUDGET_SECONDS` while the store does not answer (a restart, a failover, a dropped
connection), and when it never lands the failure is kept by the engine (its next compaction of the
session takes the lease over) and reported on this host (recovery then judges the lease stale), and
the error raised is a :class:`LockHeldError` naming the compaction, the held lock and what releases
it. A conflicting save means another writer got there first: the start reports busy; a commit
re-checks stability on a fresh load and retries once, and never commits over a bracket that
recovery already closed.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from compaction.engine.lock import (
    UnreleasedLeases,
    clear_failure,
    closed_in_log,
    inspect_lock,
    new_lease,
    report_failure,
)
from compaction.engine.meters import Meter
from compaction.engine.selection import Span, leading_task_statement, span_for
from compaction.errors import (
    BusyError,
    CommitError,
    ConcurrencyError,
    EmptySummaryError,
    FidelityError,
    LeaseTakenError,
    LockHeldError,
    ShrinkError,
    SpanError,
    StoreError,
    SurfaceChangedError,
    error_chain,
)
from compaction.handover.analysis import SpanAnalysis
from compaction.handover.carried import carried_hashes, recall_carried
from compaction.handover.completion import Completed, RendersFacts, SpanReading, complete
from compaction.handover.facts import SpanFacts, span_facts
from compaction.handover.facts_fold import folded_facts
from compaction.handover.fidelity import fidelity_problems, measure_fidelity
from compaction.handover.fold import folded_identifiers
from compaction.handover.identifiers import extract, span_unions
from compaction.handover.reading import read
from compaction.sessions.blocks import Message, TextBlock
from compaction.sessions.collector import collector_paused
from compaction.sessions.events import Replace, SessionEvent, UserMessage
from compaction.sessions.leases import Grant, LeaseClaim
from compaction.sessions.session import Session, project
from compaction.sessions.store import SessionStore
from compaction.vocabulary.checkpoint import checkpoint_message, new_compaction_id
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.contract import CompactionResult
from compaction.vocabulary.events import CompactEnd, CompactStart, CompactSummary, ShadowedRange
from compaction.vocabulary.instruction import instruction_with_focus
from compaction.vocabulary.summarizer import Summarizer, SummaryOutput, SummaryRequest

APPENDIX_TRIES = 4
"""Times the appendix is cut down to leave the checkpoint smaller than its span."""

log = logging.getLogger("compaction")

Stability = Literal["whole-surface", "selected-span"]

CLOSE_BUDGET_SECONDS = 30.0
"""How long a failed compaction keeps trying to store its ``compact/end`` (backoff from 0.1 s,
doubling to 2 s) before it reports the lock as held."""


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
    source_command_id: str | None = None
    """The command (``/compact``) that asked for this compaction: carried by each of its records."""
    focus: str | None = None
    """The user's summarization focus (``/compact <focus>``), added to the instruction."""
    on_progress: Callable[[str], None] | None = None  # called with the stage name
    analysis: SpanAnalysis = field(default_factory=SpanAnalysis)
    """What the handover has read of the session (the engine passes the read-ahead's): active while
    the transaction runs, so the summarizer, the completion and the gate share one reading."""
    unreleased: UnreleasedLeases = field(default_factory=UnreleasedLeases)
    """The engine's record of its compactions whose ``compact/end`` could not be stored."""
    takeover: CompactStart | None = None
    """This process's own failed, unclosed start (from ``unreleased``): closed in the new start's save."""
    close_budget: float = CLOSE_BUDGET_SECONDS
    _grant: Grant | None = field(default=None, init=False, repr=False)
    """The session's lease where the store keeps one besides the log (JetStream)."""
    _ended: bool = field(default=False, init=False, repr=False)
    """The bracket is closed in the log (by this transaction or another process)."""

    async def run(self) -> CompactionResult:
        with self.analysis.active():
            return await self._run()

    async def _run(self) -> CompactionResult:
        start = self._start()
        try:
            return await self._after_start(start)
        finally:
            self._release()

    async def _after_start(self, start: CompactStart) -> CompactionResult:
        try:
            return await self._summarize_and_commit(start)
        except asyncio.CancelledError as e:
            reason = error_chain(e) if str(e) else "the compaction task was cancelled"
            try:
                self._close(start, f"cancelled: {reason}")
            except Exception as close_error:  # cancellation wins; the unclosed start is kept
                self._hold(start, f"cancelled: {reason}", close_error)
                log.error(
                    "compaction %s was cancelled and its compact/start (seq %d) could not be closed: %s",
                    start.compaction_id,
                    start.seq,
                    error_chain(close_error),
                )
            raise
        except _ClosedError as closed:
            raise closed.error from None
        except Exception as e:
            await self._close_failed(start, e)
            raise

    # ------------------------------------------------------------ start (the lock)

    def _start(self) -> CompactStart:
        session = self.session
        event = CompactStart(
            compaction_id=new_compaction_id(),
            turn=self.owner,
            lease=new_lease(self.config.lease_seconds),
            strategy=self.strategy,
            source_command_id=self.source_command_id,
            focus=self.focus,
        )
        grant = self._claim(event)
        mark = session.mark()
        taken = self._take_over()
        stamped = session.append(event)
        try:
            self._save()
        except ConcurrencyError as e:
            session.rollback(mark)
            self._give_back(grant)
            raise BusyError(
                f"compaction: another writer appended to session {session.id} first (seq "
                f"{stamped.seq}); its compaction or its step won the race. Reload and retry."
            ) from e
        except StoreError:
            session.rollback(mark)  # not stored: an in-memory start would block every later attempt
            self._give_back(grant)
            raise
        assert isinstance(stamped, CompactStart)
        if grant is not None and self.store is not None:
            self._grant = self.store.confirm_lease(grant, stamped.seq)
        if taken is not None:
            self.unreleased.forget(session.id)
            clear_failure(taken.compaction_id)
            log.warning(
                "compaction %s: took over this process's own failed compaction %s (compact/start "
                "seq %d), closed at seq %d",
                event.compaction_id, taken.compaction_id, taken.seq, stamped.seq - 1,
            )  # fmt: skip
        self._progress(f"compact/start seq {stamped.seq} ({len(self.span.seqs)} nodes)", "started")
        return stamped

    def _claim(self, event: CompactStart) -> Grant | None:
        """Claim the session's lease where the store keeps one besides the log (JetStream: the
        claim, not the append of the start, decides between racing processes); None elsewhere."""
        acquire = getattr(self.store, "acquire_lease", None)
        if acquire is None:  # no store, or one that keeps no lease: the log's compact/start decides
            return None
        session = self.session
        lease = event.lease
        claim = LeaseClaim(session.id, event.compaction_id, lease.host, lease.pid, lease.expires_at)
        replaces = self.takeover.compaction_id if self.takeover is not None else None
        try:
            grant: Grant | None = acquire(
                claim, replaces=replaces, closed=lambda held: closed_in_log(session, held)
            )
            return grant
        except LeaseTakenError as e:
            raise BusyError(
                f"compaction: another writer holds the compaction lease of session {session.id} "
                f"(compaction {e.compaction_id}, held by {e.host} pid {e.pid} until "
                f"{e.expires_at}); its compaction won the race. Reload and retry."
            ) from e

    def _give_back(self, grant: Grant | None) -> None:
        if grant is not None and self.store is not None:
            self.store.release_lease(grant)

    def _release(self) -> None:
        """Give the lease back once the bracket is closed (committed, failed and ended, or closed
        by another process); a held lock (:meth:`_hold`) keeps it."""
        grant, self._grant = self._grant, None
        if self._ended:
            self._give_back(grant)

    def _take_over(self) -> CompactStart | None:
        """Append (unsaved) the ``compact/end`` of this process's own failed compaction, if the
        engine handed one over: it is stored with the new start, in one save."""
        taken = self.takeover
        if taken is None:
            return None
        self.session.append(
            CompactEnd(
                compaction_id=taken.compaction_id,
                turn=taken.turn,
                error=(
                    f"failed, and its compact/end could not be stored then; taken over by its own "
                    f"process ({taken.lease.host} pid {taken.lease.pid})"
                ),
                source_command_id=taken.source_command_id,
            )
        )
        return taken

    # ------------------------------------------------------------ summarize, check, commit

    async def _summarize_and_commit(self, start: CompactStart) -> CompactionResult:
        session = self.session
        captured_nodes = tuple(session.nodes)
        shadowed = self.span.seqs
        prices = self.meter.prices_for(session, shadowed)
        shadowed_tokens = sum(map(prices.__getitem__, shadowed))
        output, span = await self._summarized(start, shadowed)
        self._progress(f"summary received from {output.provider}/{output.model}", "summarized")
        text = output.text.strip()
        if not text:
            raise EmptySummaryError(
                f"summarization produced no text summary content ({output.provider}/"
                f"{output.model}, compaction {start.compaction_id})"
            )
        identifiers = span.reading.identifiers if span.reading is not None else extract(span.messages)
        completed = await complete(
            output,
            span.request,
            span.messages,
            self.summarizer,
            self.config.completion,
            identifiers=identifiers,
            required_ratio=self.config.min_identifier_ratio,
            require_sections=self.config.require_sections,
            reading=span.reading,
        )
        completed, checkpoint, framed_tokens = self._within_span(completed, start, shadowed_tokens)
        text = completed.text
        summary = (TextBlock(text),)
        if framed_tokens >= shadowed_tokens:
            added = completed.record.appendix if completed.record else ""
            raise ShrinkError(
                f"summary is not smaller than the shadowed content ({framed_tokens} estimated "
                f"framed tokens >= {shadowed_tokens})"
                + (
                    f"; {len(added)} of its characters are the completion appendix (what the "
                    "fidelity gate needs of it; completion='off' drops it)"
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
            shadowed_hashes=dict(zip(map(str, shadowed), span.hashes, strict=True)),
            meter=self.meter.name,
            summary_token_count=framed_tokens,
            chunks=output.chunks,
            request_model=self.summarizer.model or None,
            completion=completed.record,
            header_sent=output.header,
            digest=output.digest,
            source_command_id=start.source_command_id,
        )
        return self._commit(start, summary_event, checkpoint, captured_nodes, output)

    async def _summarized(
        self, start: CompactStart, shadowed: tuple[int, ...]
    ) -> tuple[SummaryOutput, _ReadSpan]:
        """The summarizer's output and the span as read. When the session's folds answer the span
        (its facts, its identifiers) and its events' digests are carried, a summarizer that writes
        from facts (:class:`~compaction.handover.completion.RendersFacts`) is handed them with a
        request holding the task statement alone: the span's messages are never fetched.
        Otherwise the messages are fetched, read (the folded facts kept for them, when there are)
        and sent whole."""
        known = folded_facts(self.session, shadowed)
        if known is not None and isinstance(self.summarizer, RendersFacts):
            hashes = carried_hashes(self.session, self.analysis, shadowed)
            if hashes is not None:
                request = self._request(start.compaction_id, [])
                output = await self.summarizer.summarize_facts(request, known)
                if output is not None:
                    return output, _ReadSpan(request, [], hashes, SpanReading(known, known.identifiers))
        session = self.session
        session.preload(shadowed)
        events = list(map(session.event, shadowed))
        messages = [m for m in map(project, events) if m is not None]
        self._read_span(shadowed, events, messages, known)
        request = self._request(start.compaction_id, messages)
        output = await self.summarizer.summarize(request)
        return output, _ReadSpan(request, messages, [self.analysis.event_hash(e) for e in events])

    def _within_span(
        self, completed: Completed, start: CompactStart, shadowed_tokens: int
    ) -> tuple[Completed, Message, int]:
        """The completion with its appendix cut to what leaves the checkpoint smaller than the
        span, when the full one would not (what the gate needs stays: an appendix never turns a
        summary that passes without it into a refused one). Returns it, its checkpoint and the
        checkpoint's framed tokens."""
        checkpoint, framed = self._framed(start, completed)
        for _ in range(APPENDIX_TRIES):
            block = completed.record.appendix if completed.record else ""
            if framed < shadowed_tokens or not block:
                break
            over = framed - shadowed_tokens + 1
            chars_per_token = len(completed.text) / max(1, framed)
            budget = len(block) - math.ceil(over * chars_per_token * 1.2) - 16
            smaller = completed.within(max(0, budget))
            if smaller.record is None or len(smaller.record.appendix) >= len(block):
                break  # only what the gate needs is left
            completed = smaller
            checkpoint, framed = self._framed(start, completed)
        return completed, checkpoint, framed

    def _framed(self, start: CompactStart, completed: Completed) -> tuple[Message, int]:
        """The checkpoint message of ``completed`` and its framed tokens."""
        summary = (TextBlock(completed.text),)
        checkpoint = checkpoint_message(start.compaction_id, summary, start.source_command_id)
        return checkpoint, self.meter.message(checkpoint)

    def _read_span(
        self,
        shadowed: tuple[int, ...],
        events: list[SessionEvent],
        messages: list[Message],
        known: SpanFacts | None = None,
    ) -> None:
        """What the handover needs of the span, in the analysis before the summarizer asks, with
        the collector paused (what is read all stays alive): the readings the session carries
        (:mod:`compaction.handover.carried`, the fold of its identifiers), then the span's facts,
        which the completion checks (each message the analysis has not read is read: a process
        that just loaded the session; with the completion off, only that)."""
        with collector_paused():
            recall_carried(self.session, self.analysis, shadowed, events)
            self._recall_folded(shadowed, messages, known)
            if self.config.completion != "off":  # the completion checks the span's facts
                span_facts(messages)
            else:
                for message in messages:
                    read(message)

    def _recall_folded(
        self, shadowed: tuple[int, ...], messages: list[Message], known: SpanFacts | None
    ) -> None:
        """The span's identifiers and facts, when the read-ahead folded them (in this process or
        in the one that saved the session's snapshot; ``known``: the facts taken from the folds,
        None when they do not answer the span), kept in the analysis for these messages: the
        template, the completion and the gate find them without reading each message. A span the
        facts fold answers holds no checkpoint, so its facts' identifiers are the span's own."""
        if known is not None:
            span_facts.memo(self.analysis).remember(messages, known)
        identifiers = known.identifiers if known is not None else folded_identifiers(self.session, shadowed)
        if identifiers is not None:
            span_unions(self.analysis).remember(messages, identifiers)

    def _request(self, compaction_id: str, messages: list[Message]) -> SummaryRequest:
        return build_request(
            self.session,
            self.span.seqs,
            compaction_id,
            self.config.max_tokens,
            keep_first_user=self.config.keep_first_user_message,
            messages=messages,
            focus=self.focus,
        )

    def _check_stable(self, session: Session, captured: tuple[int, ...]) -> None:
        if self.stability == "whole-surface":
            if tuple(session.nodes) != captured:
                raise SurfaceChangedError("compaction: session surface changed during summarization")
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
                    raise CommitError(f"compaction: commit conflicted twice in session {session.id}") from e
                self._refresh_for_commit(start, captured)
                continue
            except StoreError as e:
                session.rollback(mark)  # nothing landed: the surface stays as it was
                raise CommitError(
                    f"compaction {start.compaction_id}: the store refused the commit in session "
                    f"{session.id}: {e}"
                ) from e
            self._ended = True
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
            self._ended = True
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

    async def _close_failed(self, start: CompactStart, error: Exception) -> None:
        """Store ``compact/end{error}`` for the failed compaction, retrying with backoff while the
        store does not answer; when it never does within :attr:`close_budget`, keep the lock's
        failure (:meth:`_hold`) and raise :class:`LockHeldError` instead of the store's error."""
        reason = error_chain(error)
        deadline = time.monotonic() + self.close_budget
        delay = 0.1
        while True:
            try:
                self._close(start, reason)
                return
            except StoreError as close_error:
                if self.store is None or time.monotonic() + delay > deadline:
                    releases = self._hold(start, reason, close_error)
                    raise LockHeldError(
                        start.compaction_id, self.session.id, start.seq, releases,
                        f"{reason}; storing its compact/end failed too: {error_chain(close_error)}",
                    ) from error  # fmt: skip
                log.warning(
                    "compaction %s failed and its compact/end could not be stored yet (%s); "
                    "retrying in %.1f s",
                    start.compaction_id, error_chain(close_error), delay,
                )  # fmt: skip
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _hold(self, start: CompactStart, reason: str, close_error: Exception) -> str:
        """The failed compaction's lock stays held: remember it for the engine's next attempt,
        report it on this host for recovery; what releases the lock, for the error message."""
        session_id = self.session.id
        self.unreleased.remember(session_id, start.compaction_id)
        report = report_failure(start, session_id, f"{reason}; {error_chain(close_error)}")
        lease = start.lease
        reported = (
            f"`compaction recover --repair` on {lease.host} closes it now (the failure is reported "
            f"in {report})"
            if report is not None
            else f"`compaction recover --repair` closes it once the lease expires at "
            f"{lease.expires_at.isoformat()}"
        )
        return (
            f"it is held by {lease.host} pid {lease.pid} until {lease.expires_at.isoformat()}; "
            "the next compaction of the session by the same engine, in this process, takes it "
            f"over at once, or {reported}"
        )

    def _close(self, start: CompactStart, error: str) -> None:
        session = self.session
        end = CompactEnd(
            compaction_id=start.compaction_id,
            turn=start.turn,
            error=error,
            source_command_id=start.source_command_id,
        )
        for attempt in (1, 2):
            if inspect_lock(session).start_seq != start.seq:
                self._ended = True
                return  # already closed by someone else
            mark = session.mark()
            session.append(end)
            try:
                self._save()
                self._ended = True
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


@dataclass(frozen=True)
class _ReadSpan:
    """The span as a compaction read it: the request sent, the messages read (none when the
    folds answered), each shadowed event's hash, and the reading the folds gave (if so)."""

    request: SummaryRequest
    messages: list[Message]
    hashes: list[str]
    reading: SpanReading | None = None


def build_request(
    session: Session,
    shadowed: tuple[int, ...],
    compaction_id: str,
    max_tokens: int,
    *,
    keep_first_user: bool = True,
    messages: Sequence[Message] | None = None,
    focus: str | None = None,
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
        instruction=instruction_with_focus(focus),
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
        CompactEnd(
            compaction_id=start.compaction_id,
            turn=start.turn,
            source_command_id=start.source_command_id,
        ),
    ]


def _result(start: CompactStart, events: list[SessionEvent], summary: CompactSummary) -> CompactionResult:
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
