"""The session builder: a normalized stream (user prompts, harness context, assistant steps,
tool results) into session events that satisfy the surface rules and the turn/step rules
(docs/sessions.md):

    user/message ...                      a user prompt closes the open turn; it sits between turns
    turn/start n                          opened lazily by the first model call after a prompt
      request/header                      the first one, and again whenever provider/model changes
      step/start n.s
        assistant/message                 one per model call
        tool/call                         one per dispatched call of that message
        tool/result                       real answers (source_event_seqs = (tool/call seq,))
        tool/result synthesized           any call still unanswered when the step closes
      step/end n.s
    turn/end n
    ...
    session/invariants                    last: what the library appends later is checked

Tool results that answer no call of the open step are never appended (the surface must stay
balanced); they are reported in ``skipped``. Each record of the input is imported once
(:meth:`SessionBuilder.first_time`, by its format's record id: :mod:`compaction.importers.records`),
and every tool call id is used once in the session: a call whose id an earlier call of another
record already used gets a fresh one (``ID#2``), its results follow it, and a note names both.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import msgspec

from compaction.engine.foreign import ForeignCompaction, import_foreign_compaction
from compaction.errors import EventRuleError, TranscriptError
from compaction.importers.json_input import read_time
from compaction.importers.records import RecordIds
from compaction.importers.result import ImportedSession
from compaction.sessions.blocks import (
    Block,
    Message,
    ResultPart,
    Source,
    ToolCallBlock,
    ToolResultBlock,
)
from compaction.sessions.events import (
    AssistantMessage,
    ContextMessage,
    RequestHeader,
    SessionEvent,
    SessionInvariants,
    SteeringMessage,
    StepEnd,
    StepStart,
    ToolCall,
    ToolResult,
    ToolSpec,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    Usage,
    UserMessage,
    now_utc,
)
from compaction.sessions.interrupted import interrupted_result
from compaction.sessions.invariants import STRICT_INVARIANTS
from compaction.sessions.session import Session

IMPORT_BOUNDARY = "import: the events after this are written under the invariants"
"""The origin of the ``session/invariants`` marker that ends every imported session."""

# ---------------------------------------------------------------- the builder


@dataclass
class _PendingCall:
    block: ToolCallBlock
    call_seq: int | None  # the tool/call seq, or None when the call was never dispatched
    origin: str

    @property
    def call_id(self) -> str:
        return self.block.id


@dataclass
class _Header:
    provider: str
    model: str
    system: str | None = None
    tools: tuple[ToolSpec, ...] = ()
    origin: str = "request envelope"


class SessionBuilder:
    """Appends well-formed events to a new :class:`Session` and counts what it did."""

    def __init__(self, session_id: UUID, *, source: str, format: str) -> None:
        self.source = source
        self.format = format
        self._time: datetime = now_utc()
        self.session = Session(session_id, strict_structure=True, clock=lambda: self._time)
        self.skipped: list[str] = []
        self.notes: list[str] = []
        self.compactions = 0
        self.tool_calls = 0
        self.tool_results = 0
        self.synthesized = 0
        self.messages = 0
        self._turn = 0
        self._step = 0
        self._turn_open = False
        self._step_open = False
        self._pending: dict[str, _PendingCall] = {}
        self._answered: set[str] = set()
        self._turn_reason = TurnEndReason(kind="completed")
        self._header: _Header | None = None  # what the next header would say
        self._emitted: tuple[str, str] | None = None  # provider/model of the last header
        self._bad_times: set[tuple[str, str]] = set()  # (origin, value) of each unusable timestamp noted
        self.records = RecordIds(source)
        self._call_ids: dict[str, str] = {}  # every call id used in the session -> its call's origin

    # ------------------------------------------------------------ reporting

    def skip(self, origin: str, why: str) -> None:
        self.skipped.append(f"{origin}: {why}")

    def note(self, text: str) -> None:
        self.notes.append(text)

    def first_time(self, origin: str, key: str | None, record: Any) -> bool:
        """Whether this record of the input (``key``: its format's record id) is new. A repeat is
        skipped with the record it repeats; one with the same key and other content raises
        :class:`TranscriptError` naming both (:class:`~compaction.importers.records.RecordIds`)."""
        why = self.records.repeat(origin, key, record)
        if why is not None:
            self.skip(origin, why)
        return why is None

    def at(self, time: datetime | None) -> None:
        """Events appended from now on carry ``time`` (the input's own timestamp when known)."""
        if time is not None:
            self._time = time

    def time_of(self, value: Any, origin: str) -> datetime | None:
        """The record's timestamp ``value`` as aware UTC, or None when it has none. One that is not
        a usable time (out of range, unreadable) is noted once per record, naming the record and the
        value, and gives None: the record's events keep the time of the record before it."""
        read = read_time(value)
        if not isinstance(read, str):
            return read
        if (origin, repr(value)) not in self._bad_times:
            self._bad_times.add((origin, repr(value)))
            self.note(f"{origin}: timestamp {value!r} {read}; its events keep the previous record's time")
        return None

    # ------------------------------------------------------------ the request envelope

    def header(
        self,
        provider: str,
        model: str,
        *,
        system: str | None = None,
        tools: Iterable[ToolSpec] = (),
        origin: str = "request envelope",
    ) -> None:
        """Set the envelope; it is emitted inside the next turn, before the next model call."""
        self._header = _Header(provider, model, system, tuple(tools), origin)

    def _emit_header(self, provider: str, model: str, origin: str) -> None:
        """The configured envelope before the first model call; a change whenever the model
        answering differs from the previous call's (``<synthetic>`` placeholders excepted)."""
        if model.startswith("<"):
            return
        reason: Literal["initial", "change"]
        if self._emitted is None:
            header = self._header or _Header(provider, model, origin=origin)
            reason = "initial"
        elif self._emitted != (provider, model):
            base = self._header or _Header(provider, model)
            header = _Header(provider, model, base.system, base.tools, origin)
            reason = "change"
        else:
            return
        self._header = header
        self._emitted = (provider, model)
        self._append(
            RequestHeader(
                provider=header.provider,
                model=header.model,
                system=header.system,
                tools=header.tools,
                reason=reason,
                origin=header.origin,
            )
        )

    # ------------------------------------------------------------ conversation items

    def user(self, message: Message, origin: str, *, time: datetime | None = None) -> None:
        """A user prompt: closes the open turn, then sits between turns."""
        self.at(time)
        self.close_turn(origin)
        self._append(UserMessage(message=message, surface_op="append", origin=origin))
        self.messages += 1

    def context(self, message: Message, origin: str, *, time: datetime | None = None) -> None:
        """Harness-injected user-role content: closes the open step, keeps the turn open."""
        self.at(time)
        self._close_step(origin)
        self._append(ContextMessage(message=message, surface_op="append", origin=origin))
        self.messages += 1

    def steering(self, message: Message, origin: str, *, time: datetime | None = None) -> None:
        """A user message delivered while a turn is under way (typed while the agent worked):
        closes the open step, keeps the turn open; a plain prompt when no turn is open."""
        if not self._turn_open:
            self.user(message, origin, time=time)
            return
        self.at(time)
        self._close_step(origin)
        self._append(SteeringMessage(message=message, surface_op="append", origin=origin))
        self.messages += 1

    def assistant(
        self,
        message: Message,
        origin: str,
        *,
        usage: Usage | None = None,
        interrupted: bool = False,
        dispatched: bool = True,
        call_origins: dict[str, str] | None = None,
        time: datetime | None = None,
    ) -> None:
        """One model call: a new step with the message and a tool/call per dispatched call.

        A tool-call block repeating an id of the same message is dropped (reported): one result
        could answer only one of them, and the surface would never balance again."""
        self.at(time)
        message = self._without_repeated_calls(message, origin)
        message, renamed = self._with_unused_call_ids(message, origin, call_origins or {})
        self._close_step(origin)
        self._open_turn(origin)
        provider = message.source.provider or "unknown"
        model = message.source.model or "unknown"
        self._emit_header(provider, model, origin)
        self._step += 1
        self._append(StepStart(turn=self._turn, step=self._step, origin=origin))
        self._step_open = True
        self._append(
            AssistantMessage(
                turn=self._turn,
                step=self._step,
                message=message,
                usage=usage,
                interrupted=interrupted,
                surface_op="append",
                origin=origin,
            )
        )
        self.messages += 1
        for block in message.content:
            if isinstance(block, ToolCallBlock):
                written = renamed.get(block.id, block.id)  # the id the input's results name
                call_origin = (call_origins or {}).get(written, origin)
                self._register_call(block, written, call_origin, dispatched)

    def _without_repeated_calls(self, message: Message, origin: str) -> Message:
        seen: set[str] = set()
        kept: list[Block] = []
        for index, block in enumerate(message.content):
            if isinstance(block, ToolCallBlock):
                if block.id in seen:
                    self.skip(f"{origin} block {index}", f"repeated tool call id {block.id!r}")
                    continue
                seen.add(block.id)
            kept.append(block)
        if len(kept) == len(message.content):
            return message
        return msgspec.structs.replace(message, content=tuple(kept))

    def _with_unused_call_ids(
        self, message: Message, origin: str, call_origins: dict[str, str]
    ) -> tuple[Message, dict[str, str]]:
        """The message with a fresh id (``ID#2``, ``ID#3``...) for each tool call whose id an
        earlier call of the session used (ids on the surface are unique: a provider refuses a
        request that repeats one), and the new ids -> the input's."""
        renamed: dict[str, str] = {}
        kept: list[Block] = []
        for block in message.content:
            if not isinstance(block, ToolCallBlock):
                kept.append(block)
                continue
            call = block
            if call.id in self._call_ids:
                fresh = next(
                    f"{call.id}#{n}" for n in itertools.count(2) if f"{call.id}#{n}" not in self._call_ids
                )
                self.note(
                    f"{call_origins.get(call.id, origin)}: tool call id {call.id!r} was already used by "
                    f"{self._call_ids[call.id]}; imported as {fresh!r} (its results follow it)"
                )
                renamed[fresh] = call.id
                call = msgspec.structs.replace(call, id=fresh)
            self._call_ids[call.id] = call_origins.get(renamed.get(call.id, call.id), origin)
            kept.append(call)
        if not renamed:
            return message, renamed
        return msgspec.structs.replace(message, content=tuple(kept)), renamed

    def _register_call(self, block: ToolCallBlock, written: str, origin: str, dispatched: bool) -> None:
        """Record the call ``block`` (``written``: its id in the input, which its results name)."""
        self.tool_calls += 1
        call_seq: int | None = None
        if dispatched:
            call = ToolCall(
                turn=self._turn,
                step=self._step,
                call_id=block.id,
                name=block.name,
                arguments=block.arguments,
                origin=origin,
            )
            call_seq = self._append(call).seq
        self._pending[written] = _PendingCall(block, call_seq, origin)

    def result(
        self,
        call_id: str,
        content: tuple[ResultPart, ...],
        origin: str,
        *,
        is_error: bool = False,
        message_id: str | None = None,
        meta: dict[str, Any] | None = None,
        time: datetime | None = None,
    ) -> bool:
        """A tool's answer; appended only when it answers a pending call of the open step."""
        self.at(time)
        pending = self._pending.get(call_id) if self._step_open else None
        if pending is None:
            why = "answered twice" if call_id in self._answered else "no matching call in its step"
            self.skip(origin, f"tool result for {call_id!r} not imported ({why})")
            return False
        if pending.call_seq is None:
            # the input said the call never ran (an aborted message), yet it holds the result
            call = pending.block
            pending.call_seq = self._append(
                ToolCall(
                    turn=self._turn,
                    step=self._step,
                    call_id=call.id,
                    name=call.name,
                    arguments=call.arguments,
                    origin=f"{origin} (dispatch inferred from this result)",
                )
            ).seq
            self.note(f"{origin}: tool call {call_id} was marked not dispatched but has a result")
        answered = pending.call_id  # the call's id in the session (a fresh one when it was reused)
        message = Message(
            id=message_id or f"tool-result-{answered}",
            role="user",
            content=(ToolResultBlock(tool_call_id=answered, content=content, is_error=is_error),),
            source=Source(kind="tool", call_id=answered),
        )
        self._append(
            ToolResult(
                turn=self._turn,
                step=self._step,
                message=message,
                meta=meta,
                surface_op="append",
                source_event_seqs=(pending.call_seq,),
                origin=origin,
            )
        )
        del self._pending[call_id]
        self._answered.add(call_id)
        self.tool_results += 1
        return True

    def turn_reason(self, reason: TurnEndReason) -> None:
        """How the open turn ended (default ``completed``)."""
        if self._turn_open:
            self._turn_reason = reason

    def compaction(self, origin: str, what: str) -> None:
        """Count a compaction marker of the input (its summary arrives via :meth:`foreign`)."""
        self.compactions += 1
        self.note(f"{origin}: compaction marker ({what})")

    def foreign(self, compaction: ForeignCompaction) -> None:
        """Another harness's compaction: closes the open turn, then becomes a compaction bracket
        (:func:`compaction.engine.foreign.import_foreign_compaction`)."""
        self.close_turn(compaction.origin)
        try:
            import_foreign_compaction(self.session, compaction)
        except EventRuleError as e:
            raise TranscriptError(
                self.source, None, f"the compaction at {compaction.origin} was rejected: {e}"
            ) from e
        self.note(f"{compaction.origin}: imported as a compaction bracket ({compaction.provider})")
        self.messages += 1

    # ------------------------------------------------------------ closing

    def _open_turn(self, origin: str) -> None:
        if self._turn_open:
            return
        self._turn += 1
        self._step = 0
        self._append(TurnStart(turn=self._turn, origin=origin))
        self._turn_open = True
        self._turn_reason = TurnEndReason(kind="completed")

    def _close_step(self, origin: str) -> None:
        if not self._step_open:
            return
        for pending in list(self._pending.values()):
            self._synthesize(pending)
        self._pending.clear()
        self._append(StepEnd(turn=self._turn, step=self._step, origin=origin))
        self._step_open = False

    def _synthesize(self, pending: _PendingCall) -> None:
        result = self._append(
            interrupted_result(
                self._turn,
                self._step,
                pending.call_id,
                pending.call_seq,
                self.session.next_seq,
                origin=f"synthesized: no result for tool call {pending.call_id} ({pending.origin})",
            )
        )
        self._answered.add(pending.call_id)
        self.synthesized += 1
        self.note(
            f"{pending.origin}: tool call {pending.call_id} has no result; synthesized {_error_of(result)}"
        )

    def close_turn(self, origin: str) -> None:
        self._close_step(origin)
        if not self._turn_open:
            return
        self._append(TurnEnd(turn=self._turn, reason=self._turn_reason, origin=origin))
        self._turn_open = False

    def finish(self, origin: str = "end of input") -> ImportedSession:
        self.close_turn(origin)
        if self._emitted is None:
            self.note("no model call in the input: no request/header was emitted")
        self.session.clock = now_utc
        if len(self.session):
            # The imported history is the other harness's, as it wrote it: the audit checks it.
            # What the library writes to the session from here on is checked at append and load.
            self._append(SessionInvariants(names=STRICT_INVARIANTS, origin=IMPORT_BOUNDARY))
        return ImportedSession(
            session=self.session,
            source=self.source,
            format=self.format,
            events=len(self.session),
            messages=self.messages,
            tool_calls=self.tool_calls,
            tool_results=self.tool_results,
            synthesized_results=self.synthesized,
            compactions=self.compactions,
            skipped=self.skipped,
            notes=self.notes,
        )

    # ------------------------------------------------------------ appending

    def _append(self, event: SessionEvent) -> SessionEvent:
        try:
            return self.session.append(event)
        except EventRuleError as e:
            raise TranscriptError(
                self.source, None, f"the event built from {event.origin} was rejected: {e}"
            ) from e


def _error_of(event: SessionEvent) -> str:
    error = getattr(event, "error", None)
    return f"{error.name} ({error.code})" if error is not None else "an error result"
