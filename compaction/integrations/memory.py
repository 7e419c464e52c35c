"""The memory every adapter shares: a framework's conversation as a compacting, append-only log.

:class:`CompactingMemory` maps a framework's session key (any string) to a session of a
:class:`~compaction.sessions.store.SessionStore`, records the framework's items as this library's
events and hands back the *surface*, compacted first when it is over the threshold. Recording reuses
the importers' :class:`~compaction.sessions.importers.builder.SessionBuilder` (the turn/step/tool-call
rules of the reference loop, in one place): :class:`LiveRecorder` continues a stored session
instead of starting a new one.

A framework item becomes one of four :data:`Item` records: a user prompt (a new turn), harness
context (a system or developer message), an assistant message (one model call: a step with its tool
calls) or a tool result (answers a pending call of the open step). A step ends once its calls are
answered, and a turn once the model answers without tool calls, as in the reference loop. Every
recorded message keeps the framework's id as ``Message.id``, so an adapter can tell which of the
messages it is handed are already in the log.

Nothing is ever deleted: :meth:`CompactingMemory.pop` appends an event that takes the newest message
off the surface, and :meth:`CompactingMemory.clear` starts a new session (a new surface generation)
under the same key, the old one staying in the store.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from compaction.errors import CompactionError, IntegrationError
from compaction.service import BasicCompactService
from compaction.sessions.blocks import ImageBlock, Message, Source, TextBlock, ToolCallBlock, tool_calls_of
from compaction.sessions.events import (
    AssistantMessage,
    Replace,
    SessionResume,
    StepEnd,
    StepStart,
    TurnEnd,
    TurnEndReason,
    TurnStart,
)
from compaction.sessions.importers.builder import SessionBuilder, _PendingCall
from compaction.sessions.interrupted import open_turn
from compaction.sessions.session import Session, project
from compaction.sessions.store import SessionStore
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.contract import CompactionResult

log = logging.getLogger("compaction.integrations")

NAMESPACE = uuid.UUID("0c5b3a52-3f0e-5b8e-9a57-5d1f2f0f4c11")
"""Namespace of adapter session ids: ``uuid5(NAMESPACE, f"{key}#{generation}")``."""

MAX_GENERATIONS = 10_000


@dataclass(frozen=True)
class UserItem:
    """A user prompt (a new turn)."""

    message: Message


@dataclass(frozen=True)
class ContextItem:
    """Harness-injected user-role content (a system or developer message): no new turn."""

    message: Message


@dataclass(frozen=True)
class AssistantItem:
    """One model call's output: text, reasoning and tool-call blocks."""

    message: Message


@dataclass(frozen=True)
class ResultItem:
    """A tool's answer to ``call_id``."""

    call_id: str
    content: tuple[TextBlock | ImageBlock, ...]
    message_id: str
    is_error: bool = False


Item = UserItem | ContextItem | AssistantItem | ResultItem


# ---------------------------------------------------------------- recording


class LiveRecorder(SessionBuilder):
    """A :class:`SessionBuilder` that continues ``session`` (loaded from a store) where its log ends:
    the open turn, the open step and its pending calls are read back from the log."""

    def __init__(self, session: Session, *, source: str, format: str) -> None:
        super().__init__(session.id, source=source, format=format)
        self.session = session
        structure = session.structure
        self._turn = structure.open_turn if structure.open_turn is not None else structure.next_turn - 1
        self._turn_open = structure.open_turn is not None
        self._step = structure.open_step if structure.open_step is not None else structure.next_step - 1
        self._step_open = structure.open_step is not None
        header = session.latest_header()
        self._emitted = (header.provider, header.model) if header is not None else None
        opened = open_turn(session) if self._step_open else None
        for pending in opened.pending.values() if opened is not None else ():
            block = ToolCallBlock(id=pending.call_id, name="", arguments="")
            self._pending[pending.call_id] = _PendingCall(block, pending.call_seq, "stored log")

    def record(self, item: Item, origin: str) -> None:
        if isinstance(item, UserItem):
            self.user(item.message, origin)
        elif isinstance(item, ContextItem):
            self.context(item.message, origin)
        elif isinstance(item, AssistantItem):
            self.assistant(item.message, origin)
        elif not self.result(
            item.call_id, item.content, origin, is_error=item.is_error, message_id=item.message_id
        ):
            raise IntegrationError(
                f"session {self.session.id}: {origin} is a tool result for call {item.call_id!r}, "
                f"expected it to answer a pending call of the open step (step "
                f"{self._step if self._step_open else 'none'}); found {self.skipped[-1]}"
            )

    def settle(self, last: Item | None, origin: str) -> None:
        """End the open step once every call of it is answered (a model call is next), and the turn
        when the last item was a model answer without tool calls (as the reference loop does)."""
        if self._step_open and not self._pending:
            self._close_step(origin)
        if isinstance(last, AssistantItem) and not tool_calls_of(last.message):
            self.close_turn(origin)


# ---------------------------------------------------------------- the memory


class CompactingMemory:
    """Sessions of one store, keyed by the framework's session key, compacted under pressure.

    ``service`` decides when and how to compact (default: a :class:`BasicCompactService` with
    ``context_window``); ``provider`` names the framework on the ``request/header`` events."""

    def __init__(
        self,
        url: str | None = None,
        *,
        store: SessionStore | None = None,
        service: BasicCompactService | None = None,
        context_window: int | None = None,
        provider: str = "agent-framework",
        model: str = "unknown",
        system: str | None = None,
    ) -> None:
        if store is not None and url is not None:
            raise IntegrationError(f"expected a store URL or an open store, found both (url {url!r})")
        self.store = store if store is not None else SessionStore.open(url)
        self._owns_store = store is None
        if service is None:
            if context_window is None:
                raise IntegrationError(
                    f"{provider}: expected context_window= (the model's context window, in tokens) or "
                    "service= (a BasicCompactService) to decide when to compact; found neither"
                )
            service = BasicCompactService(BasicConfig(context_window=context_window))
        self.service = service
        self.provider = provider
        self.model = model
        self.system = system
        self.compactions: list[CompactionResult] = []

    def close(self) -> None:
        if self._owns_store:
            self.store.close()

    # ------------------------------------------------------------ keys and generations

    def session_id(self, key: str) -> uuid.UUID:
        """The session that holds ``key``'s current surface generation."""
        generation = self._generation(key)
        return generation_id(key, max(generation, 0))

    def _generation(self, key: str) -> int:
        """The newest stored generation of ``key`` (-1: none yet)."""
        found = -1
        while found + 1 < MAX_GENERATIONS and self.store.exists(generation_id(key, found + 1)):
            found += 1
        return found

    def load(self, key: str) -> Session:
        """The current session of ``key`` (a new, unsaved one when the key is new)."""
        session_id = self.session_id(key)
        if self.store.exists(session_id):
            return self.store.get(session_id)
        return self.store.create(session_id)

    # ------------------------------------------------------------ writing

    def record(self, key: str, items: Sequence[Item], *, origin: str) -> Session:
        """Append ``items`` as events, in order, and save them in one atomic write."""
        session = self.load(key)
        recorder = LiveRecorder(session, source=f"{self.provider}:{key}", format=self.provider)
        recorder.header(self.provider, self.model, system=self.system, origin=origin)
        for index, item in enumerate(items):
            recorder.record(item, f"{origin} item {index}")
        recorder.settle(items[-1] if items else None, f"{origin} (settled)")
        self.store.save(session)
        return session

    def recorded_ids(self, session: Session) -> set[str]:
        """The framework ids of every message recorded in ``session`` (surface or shadowed)."""
        found: set[str] = set()
        for event in session.events():
            message = project(event) if event.SURFACE else None
            if message is not None:
                found.add(message.id)
        return found

    def pop(self, key: str) -> Message | None:
        """Take the newest message off the surface, by appending: the log keeps it.

        The newest surface node is replaced by an ``assistant/message`` without content (which
        derives to nothing), in a step of its own: a surface replacement, never a deleted row."""
        session = self.load(key)
        visible = [(seq, m) for seq in reversed(session.nodes) if (m := project(session.event(seq)))]
        if not visible:
            return None
        newest, message = visible[0]  # an earlier pop's empty node is skipped: it shows nothing
        recorder = LiveRecorder(session, source=f"{self.provider}:{key}", format=self.provider)
        recorder.close_turn("pop_item")
        turn = session.structure.next_turn
        source = Source(kind="model", provider=self.provider, model=self.model)
        empty = Message(id=f"popped-{newest}", role="assistant", content=(), source=source)
        session.append_all(
            [
                TurnStart(turn=turn, origin="pop_item"),
                StepStart(turn=turn, step=1, origin="pop_item"),
                AssistantMessage(
                    turn=turn,
                    step=1,
                    message=empty,
                    surface_op=Replace(newest, newest),
                    source_event_seqs=(newest,),
                    origin=f"pop_item: removes seq {newest} from the surface",
                ),
                StepEnd(turn=turn, step=1, origin="pop_item"),
                TurnEnd(turn=turn, reason=TurnEndReason(kind="completed"), origin="pop_item"),
            ]
        )
        self.store.save(session)
        return message

    def clear(self, key: str) -> uuid.UUID:
        """Start a new surface generation for ``key``: a new session whose first event is a
        ``session/resume``; the previous generations stay in the store, untouched."""
        generation = self._generation(key) + 1
        session = self.store.create(generation_id(key, generation))
        session.append(SessionResume(origin=f"clear_session of {key!r}: generation {generation}"))
        self.store.save(session)
        return session.id

    # ------------------------------------------------------------ reading

    async def surface(self, key: str) -> list[Message]:
        """The messages the model is to see: compacted first when over the threshold."""
        session = self.load(key)
        if session.saved_length == 0:
            return []
        await self.compact(session)
        return session.derive_messages()

    async def compact(self, session: Session) -> None:
        """Compact ``session`` when it is over the threshold: inside its open turn when one is
        open (automatic), else between turns. A failure is logged; the surface stays valid."""
        try:
            if session.open_turn is not None:
                result = await self.service.compact_if_needed(session, store=self.store)
                results = [result] if result is not None else []
            else:
                results = await self.service.compact_to_threshold(session, store=self.store)
        except CompactionError as e:
            log.warning("compaction of session %s failed: %s; the surface is sent as it is", session.id, e)
            return
        self.compactions.extend(results)


def generation_id(key: str, generation: int) -> uuid.UUID:
    """The session id of ``key``'s ``generation``-th surface (a UUID key is its own generation 0)."""
    if generation == 0:
        try:
            return uuid.UUID(key)
        except ValueError:
            pass
    return uuid.uuid5(NAMESPACE, f"{key}#{generation}")
