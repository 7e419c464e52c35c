"""The memory every adapter shares: a framework's conversation as a compacting, append-only log.

:class:`CompactingMemory` maps a framework's session key (any string) to a session of a
:class:`~compaction.sessions.store.SessionStore`, records the framework's items as this library's
events and hands back the *surface*, compacted first when it is over the threshold. Recording reuses
the importers' :class:`~compaction.importers.builder.SessionBuilder` (the turn/step/tool-call
rules of the reference loop, in one place): :class:`LiveRecorder` continues a stored session
instead of starting a new one.

A framework item becomes one of four :data:`Item` records: a user prompt (a new turn), harness
context (a system or developer message), an assistant message (one model call: a step with its tool
calls) or a tool result (answers a pending call of the open step). A step ends once its calls are
answered, and a turn once the model answers without tool calls, as in the reference loop. Every
recorded message keeps the framework's id as ``Message.id``, so an adapter can tell which of the
messages it is handed are already in the log.

Identity: a conversation is named by the framework's own key (a LangGraph ``thread_id``, an Agents
SDK session id, a pydantic-ai conversation key) *within its framework*: the session id is
``uuid5(NAMESPACE, "<framework>\x1f<key>#<generation>")``, so the same key in two frameworks names two
sessions. A key that is a UUID names that session itself; when the session's first
``request/header`` names another framework, :class:`~compaction.errors.ForeignSessionError` is raised
unless the memory was made with ``allow_foreign=True``.

Async all the way: the store is synchronous, so every store call (and the compaction, which reads
and writes the store) runs in a worker thread (:func:`asyncio.to_thread`), never on the event loop;
a summarizer of the caller's loop (a framework's own model) is called back on that loop
(:class:`LoopSummarizer`). Operations on one session are serialized by a per-session
:class:`asyncio.Lock`, and :meth:`CompactingMemory.run_lock` serializes whole runs of one
conversation, synchronous and async runs alike (a :class:`~compaction.integrations.runlock.RunLock`).
A save refused with :class:`~compaction.errors.ConcurrencyError` (another process appended first)
is reloaded and retried ``retries`` times (default once), then fails with
:class:`~compaction.errors.ConversationConflictError`. A save that fails in the database (a dropped
connection, a restart) is retried once on the same session object, in the worker thread, after
checking whether its events were stored after all, so a step's events are never doubled
(:func:`~compaction.sessions.retry.save_retrying`).

Nothing is ever deleted: :meth:`CompactingMemory.pop` appends an event that takes the newest message
off the surface, and :meth:`CompactingMemory.clear` starts a new session (a new surface generation)
under the same key, the old one staying in the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
import uuid
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Coroutine, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from compaction.errors import (
    CompactionError,
    ConcurrencyError,
    ConversationConflictError,
    ForeignSessionError,
    IntegrationError,
)
from compaction.importers.builder import SessionBuilder, _PendingCall
from compaction.integrations.runlock import RunLock
from compaction.service import BasicCompactService, Settings, known_window, load_settings, service_for
from compaction.sessions.blocks import Message, ResultPart, Source, ToolCallBlock, tool_calls_of
from compaction.sessions.commands import CommandResult, parse_command
from compaction.sessions.events import (
    AssistantMessage,
    Replace,
    RequestHeader,
    SessionResume,
    StepEnd,
    StepStart,
    TurnEnd,
    TurnEndReason,
    TurnStart,
)
from compaction.sessions.interrupted import open_turn
from compaction.sessions.invariants import DEFAULT_INVARIANTS
from compaction.sessions.retry import save_retrying
from compaction.sessions.session import Session, project
from compaction.sessions.store import SessionStore, default_url, parse_store_url
from compaction.vocabulary.command import NAME as COMPACT
from compaction.vocabulary.command import handle_compact
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.contract import CompactionResult
from compaction.vocabulary.summarizer import Summarizer, SummaryOutput, SummaryRequest

log = logging.getLogger("compaction.integrations")

NAMESPACE = uuid.UUID("0c5b3a52-3f0e-5b8e-9a57-5d1f2f0f4c11")
"""Namespace of adapter session ids: ``uuid5(NAMESPACE, f"{framework}\x1f{key}#{generation}")``."""

MAX_GENERATIONS = 10_000

T = TypeVar("T")


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
    content: tuple[ResultPart, ...]
    message_id: str
    is_error: bool = False


Item = UserItem | ContextItem | AssistantItem | ResultItem


# ---------------------------------------------------------------- recording


class LiveRecorder(SessionBuilder):
    """A :class:`SessionBuilder` that continues ``session`` (loaded from a store) where its log ends:
    the open turn, the open step and its pending calls are read back from the log."""

    def __init__(self, session: Session, *, source: str, format: str, model: str = "unknown") -> None:
        super().__init__(session.id, source=source, format=format)
        self.session = session
        self.model = model
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
            self.assistant(self._stamped(item.message), origin)
        elif not self.result(
            item.call_id, item.content, origin, is_error=item.is_error, message_id=item.message_id
        ):
            raise IntegrationError(
                f"session {self.session.id}: {origin} is a tool result for call {item.call_id!r}, "
                f"expected it to answer a pending call of the open step (step "
                f"{self._step if self._step_open else 'none'}); found {self.skipped[-1]}"
            )

    def _stamped(self, message: Message) -> Message:
        """``message`` under the adapter's ``model`` when its framework names none (the Agents
        SDK's items do not): the ``request/header`` then names the model the adapter was given,
        whose policy the config file applies."""
        if message.source.model not in (None, "unknown") or self.model == "unknown":
            return message
        return msgspec.structs.replace(
            message, source=msgspec.structs.replace(message.source, model=self.model)
        )

    def settle(self, last: Item | None, origin: str) -> None:
        """End the open step once every call of it is answered (a model call is next), and the turn
        when the last item was a model answer without tool calls (as the reference loop does)."""
        if self._step_open and not self._pending:
            self._close_step(origin)
        if isinstance(last, AssistantItem) and not tool_calls_of(last.message):
            self.close_turn(origin)


class Recorded:
    """Every message a session's log records (surface or shadowed), in log order, with their ids:
    kept by the memory for each loaded session and brought up to date in O(new events), so an
    adapter's "what is new?" costs the new items, not the whole conversation, on each call.
    :meth:`keys` keeps an adapter's own keys of those messages the same way."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.ids: set[str] = set()
        self._upto = 0
        self._keys: dict[str, tuple[int, set[Any]]] = {}
        self._guard = threading.Lock()

    def update(self, session: Session) -> Recorded:
        """Take in the events ``session`` holds past the last update."""
        with self._guard:
            for event in session.events(self._upto):
                message = project(event) if event.SURFACE else None
                if message is not None:
                    self.messages.append(message)
                    self.ids.add(message.id)
            self._upto = len(session)
        return self

    def keys(self, name: str, of: Callable[[Message], Iterable[Any]]) -> set[Any]:
        """``of(message)`` for every recorded message, gathered in one set kept under ``name``
        (extended with the messages recorded since its last use)."""
        with self._guard:
            done, found = self._keys.get(name, (0, set()))
            for message in self.messages[done:]:
                found.update(of(message))
            self._keys[name] = (len(self.messages), found)
            return found


@dataclass(frozen=True)
class Compacted:
    """A session's surface before and after a pressure check (``after is before`` when nothing
    was compacted), and every message its log holds (surface or shadowed), in log order
    (``recorded``: the index's own list, read it in the call that got it)."""

    before: list[Message]
    after: list[Message]
    index: Recorded

    @property
    def recorded(self) -> list[Message]:
        return self.index.messages


# ---------------------------------------------------------------- the memory


class CompactingMemory:
    """Sessions of one store, keyed by the framework's conversation key, compacted under pressure.

    ``framework`` names the framework on the ``request/header`` events and namespaces the keys.
    ``service`` decides when and how to compact; without it, a :class:`BasicCompactService` with
    ``context_window`` (default: the known window of ``model``, :mod:`compaction.engine.windows`)
    and ``summarizer`` (default: the template). ``retries``: how many times a save refused by a
    concurrent writer is reloaded and retried. ``allow_foreign``: open a session another
    framework made (by its UUID) instead of raising :class:`ForeignSessionError`.
    ``keep_sessions``: how many recently used sessions stay loaded; ``keep_compactions``: how many
    of the latest :class:`CompactionResult` ``compactions`` keeps (the log keeps every compaction).
    A key's locks are weakly held, so the state kept per key is bounded however many keys pass.
    ``custom_instructions``: ``/compact <text>`` takes ``<text>`` as the summary's focus (else
    it is refused with the usage line). ``config``: a ``compaction.toml`` (its path, or the
    loaded :class:`~compaction.service.Settings`): its store URL when neither ``url`` nor ``store``
    is given, its meter and pruner, and the policy of each session's model (the
    ``request/header``'s ``<framework>/<model>``, e.g. ``langchain/gpt-4o``), the window falling
    back to ``context_window`` or the known window of ``model`` when the file sets none."""

    @classmethod
    def given(
        cls,
        memory: CompactingMemory | None,
        owner: str,
        url: str | None = None,
        *,
        store: SessionStore | None = None,
        config: str | Path | Settings | None = None,
        **options: Any,
    ) -> CompactingMemory:
        """The memory an adapter named ``owner`` was given, else a new one of the store ``url`` /
        ``store`` / ``config`` with ``options``; given both, an :class:`IntegrationError`."""
        if memory is None:
            return cls(url, store=store, config=config, **options)
        if url is not None or store is not None or config is not None:
            raise IntegrationError(
                f"{owner}: expected a memory= or a store (url=/store=/config=); found both"
            )
        return memory

    def __init__(
        self,
        url: str | None = None,
        *,
        store: SessionStore | None = None,
        service: BasicCompactService | None = None,
        context_window: int | None = None,
        summarizer: Summarizer | None = None,
        framework: str = "agent-framework",
        model: str = "unknown",
        system: str | None = None,
        retries: int = 1,
        allow_foreign: bool = False,
        keep_sessions: int = 256,
        keep_compactions: int = 256,
        custom_instructions: bool = False,
        config: str | Path | Settings | None = None,
    ) -> None:
        settings = load_settings(config) if isinstance(config, str | Path) else config
        if settings is not None and service is not None:
            raise IntegrationError(
                f"{framework}: expected a config= (compaction.toml) or a service=; found both "
                f"(config {settings.path!r})"
            )
        if settings is not None and url is None and store is None:
            url = settings.store_url
        if store is not None and url is not None:
            raise IntegrationError(f"expected a store URL or an open store, found both (url {url!r})")
        if retries < 0:
            raise IntegrationError(f"{framework}: expected retries >= 0; found {retries}")
        self.framework = framework
        self.model = model
        self.system = system
        self.retries = retries
        self.allow_foreign = allow_foreign
        self.custom_instructions = custom_instructions
        self.bridge = LoopSummarizer(summarizer) if summarizer is not None else None
        self.settings = settings
        self._window = context_window
        self._services: dict[str, BasicCompactService] = {}
        self.service = (
            service if service is not None or settings is not None else self._service(context_window)
        )
        if store is None:  # a malformed URL is refused here; the store opens on first use
            url = url or default_url()
            parse_store_url(url)
        self._url = url
        self._store = store
        self._opening = threading.Lock()
        self._owns_store = store is None
        self.compactions: deque[CompactionResult] = deque(maxlen=max(keep_compactions, 0))
        # a key's locks live while a caller holds or waits for them: then no one can tell a new one
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._run_locks: weakref.WeakValueDictionary[str, RunLock] = weakref.WeakValueDictionary()
        self._kept: OrderedDict[str, Session] = OrderedDict()
        self._guard = threading.Lock()
        self._indexes: weakref.WeakKeyDictionary[Session, Recorded] = weakref.WeakKeyDictionary()
        self._keep = keep_sessions

    @property
    def provider(self) -> str:
        return self.framework

    @property
    def store(self) -> SessionStore:
        """The store, opened on first use: by an async adapter in its worker thread, so opening
        it (importing its driver, opening a pool, creating tables) never blocks the event loop."""
        found = self._store
        if found is None:
            with self._opening:  # not _guard: the loop takes that one
                found = self._store
                if found is None:
                    found = self._store = SessionStore.open(self._url)
        return found

    @store.setter
    def store(self, store: SessionStore) -> None:
        self._store = store

    def _service(self, context_window: int | None) -> BasicCompactService:
        window = context_window if context_window is not None else known_window(self.model)
        if window is None:
            raise IntegrationError(
                f"{self.framework}: expected context_window= (the model's context window, in tokens), "
                f"a model= the window table knows (found model {self.model!r}) or service= (a "
                "BasicCompactService) to decide when to compact; found none of them"
            )
        return BasicCompactService(BasicConfig(context_window=window), summarizer=self.bridge)

    def service_of(self, session: Session) -> BasicCompactService:
        """The service that compacts ``session``: ``service`` (or the one made from
        ``context_window``), else the config file's for the model ``session`` was last run with
        (one per model, kept by this memory)."""
        if self.settings is None:
            if self.service is None:  # pragma: no cover - set whenever settings is None
                raise IntegrationError(f"{self.framework}: expected a service or a config; found neither")
            return self.service
        header = session.latest_header()
        model = f"{header.provider}/{header.model}" if header is not None else ""
        found = self._services.get(model)
        if found is None:
            found = service_for(self.settings, session, summarizer=self.bridge)
            if found.config.context_window is None:
                window = self._window if self._window is not None else known_window(self.model)
                found.config = dataclasses.replace(found.config, context_window=window)
            self._services[model] = found
        return found

    def close(self) -> None:
        if self._owns_store and self._store is not None:
            self._store.close()

    # ------------------------------------------------------------ keys, generations, locks

    def session_id(self, key: str) -> uuid.UUID:
        """The session that holds ``key``'s current surface generation (reads the store)."""
        return generation_id(self.framework, key, max(self._generation(key), 0))

    def _generation(self, key: str) -> int:
        """The newest stored generation of ``key`` (-1: none yet)."""
        found = -1
        while found + 1 < MAX_GENERATIONS and self.store.exists(
            generation_id(self.framework, key, found + 1)
        ):
            found += 1
        return found

    def lock(self, key: str) -> asyncio.Lock:
        """The lock that serializes this process's reads and writes of ``key``'s session."""
        with self._guard:
            found = self._locks.get(key)
            if found is None:
                found = self._locks[key] = asyncio.Lock()
            return found

    def run_lock(self, key: str) -> RunLock:
        """The lock an adapter holds for a whole run of ``key``'s conversation, so concurrent runs
        of one conversation in this process follow each other, each run's items together: sync
        and async runs alike, on any event loop (:class:`RunLock`)."""
        with self._guard:
            found = self._run_locks.get(key)
            if found is None:
                found = self._run_locks[key] = RunLock()
            return found

    async def _off_loop(self, key: str, work: Callable[[], T], worker: WorkerLoop | None = None) -> T:
        """``work`` (store calls) in a worker thread, under ``key``'s lock. With ``worker`` (the
        loop ``work`` runs its coroutine in, :func:`run_apart`), a cancellation of the caller is
        passed on to that coroutine, and the key's lock is held until the thread has finished
        with it (what it records of the cancellation is stored before the next call reads)."""
        if self.bridge is not None:
            self.bridge.loop = asyncio.get_running_loop()
        async with self.lock(key):
            if worker is None:
                return await asyncio.to_thread(work)
            running = asyncio.ensure_future(asyncio.to_thread(work))
            try:
                return await asyncio.shield(running)
            except asyncio.CancelledError as cancelled:
                worker.cancel()
                while not running.done():  # a cancel scope (anyio) cancels every await again
                    with contextlib.suppress(asyncio.CancelledError):
                        await asyncio.wait([running])
                if not running.cancelled():
                    running.exception()  # retrieved: the caller's cancellation is what is raised
                raise cancelled

    # ------------------------------------------------------------ reading the store (sync parts)

    def load_sync(self, key: str) -> Session:
        """The current session of ``key`` (a new, unsaved one when the key is new). Blocking.

        The ``keep_sessions`` most recently used sessions stay loaded: one is used again when the
        store holds no event past it (one query), else loaded again; so another process's appends
        are always seen. (A new generation another process starts, by ``clear``, is seen once the
        session is no longer kept.)"""
        kept = self._kept.get(key)
        if kept is not None and not kept.pending and self.store.stream_length(kept.id) == kept.saved_length:
            self._kept.move_to_end(key)
            return kept
        self._kept.pop(key, None)
        session_id = self.session_id(key)
        if not self.store.exists(session_id):
            return self._keep_session(key, self.store.create(session_id, invariants=DEFAULT_INVARIANTS))
        session = self._keep_session(key, self.store.get(session_id))
        owner = owner_of(session)
        if owner is not None and owner != self.framework and not self.allow_foreign:
            raise ForeignSessionError(
                f"session {session_id} (key {key!r}): expected a session of {self.framework}; found one "
                f"{owner} made (its first request/header). Pass allow_foreign=True to the adapter to "
                "open it anyway"
            )
        return session

    async def load(self, key: str) -> Session:
        return await self._off_loop(key, lambda: self.load_sync(key))

    def _keep_session(self, key: str, session: Session) -> Session:
        if self._keep > 0:
            self._kept[key] = session
            while len(self._kept) > self._keep:
                self._kept.popitem(last=False)
        return session

    def forget(self, key: str) -> None:
        """Drop ``key``'s loaded session: the next use loads it from the store."""
        self._kept.pop(key, None)

    def _retrying(self, key: str, what: str, work: Callable[[], T]) -> T:
        """``work`` again after a :class:`ConcurrencyError` (it reloads the session), ``retries``
        times; then :class:`ConversationConflictError`."""
        for attempt in range(self.retries + 1):
            try:
                return work()
            except BaseException as e:
                self.forget(key)  # what it appended in memory is not in the store: load it again
                if not isinstance(e, ConcurrencyError):
                    raise
                if attempt == self.retries:
                    raise ConversationConflictError(
                        f"{self.framework} conversation {key!r} (session {e.session_id}): expected to "
                        f"append seqs {e.first_seq}..{e.last_seq} while {what}; found them taken by "
                        f"another writer, after reloading the session and retrying {self.retries} "
                        "time(s). Another process is writing this conversation: serialize its runs "
                        "or raise retries="
                    ) from e
                log.info("%s: %s; reloading and retrying (%d of %d)", key, e, attempt + 1, self.retries)
        raise AssertionError("unreachable")  # pragma: no cover

    # ------------------------------------------------------------ writing

    def record_sync(
        self, key: str, items: Sequence[Item] | Callable[[Session], Sequence[Item]], *, origin: str
    ) -> Session:
        """Append ``items`` (or what ``items(session)`` finds new) as events, in order, in one
        atomic write; reloaded and retried when another writer came first. Blocking."""

        def attempt() -> Session:
            session = self.load_sync(key)
            found = items(session) if callable(items) else items
            if not found:
                return session
            recorder = LiveRecorder(
                session, source=f"{self.framework}:{key}", format=self.framework, model=self.model
            )
            recorder.header(self.framework, self.model, system=self.system, origin=origin)
            for index, item in enumerate(found):
                recorder.record(item, f"{origin} item {index}")
            recorder.settle(found[-1], f"{origin} (settled)")
            save_retrying(self.store, session)
            return session

        return self._retrying(key, f"recording {origin}", attempt)

    async def record(
        self, key: str, items: Sequence[Item] | Callable[[Session], Sequence[Item]], *, origin: str
    ) -> Session:
        return await self._off_loop(key, lambda: self.record_sync(key, items, origin=origin))

    def recorded(self, session: Session) -> Recorded:
        """The messages recorded in ``session`` (surface or shadowed), from the index this memory
        keeps for it: O(events appended since the last call)."""
        with self._guard:
            index = self._indexes.get(session)
            if index is None:
                index = self._indexes[session] = Recorded()
        return index.update(session)

    def recorded_ids(self, session: Session) -> AbstractSet[str]:
        """The framework ids of every message recorded in ``session`` (surface or shadowed)."""
        return self.recorded(session).ids

    def pop_sync(self, key: str) -> Message | None:
        """Take the newest message off the surface, by appending: the log keeps it.

        The newest surface node is replaced by an ``assistant/message`` without content (which
        derives to nothing), in a step of its own: a surface replacement, never a deleted row."""
        return self._retrying(key, "popping the newest item", lambda: self._pop(key))

    async def pop(self, key: str) -> Message | None:
        return await self._off_loop(key, lambda: self.pop_sync(key))

    def _pop(self, key: str) -> Message | None:
        session = self.load_sync(key)
        visible = [(seq, m) for seq in reversed(session.nodes) if (m := project(session.event(seq)))]
        if not visible:
            return None
        newest, message = visible[0]  # an earlier pop's empty node is skipped: it shows nothing
        recorder = LiveRecorder(session, source=f"{self.framework}:{key}", format=self.framework)
        recorder.close_turn("pop_item")
        turn = session.structure.next_turn
        source = Source(kind="model", provider=self.framework, model=self.model)
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
        save_retrying(self.store, session)
        return message

    def clear_sync(self, key: str) -> uuid.UUID:
        """Start a new surface generation for ``key``: a new session whose first event is a
        ``session/resume``; the previous generations stay in the store, untouched."""

        def attempt() -> uuid.UUID:
            generation = self._generation(key) + 1
            session = self.store.create(generation_id(self.framework, key, generation))
            origin = f"clear_session of {key!r}: generation {generation}"
            session.append(SessionResume(reason="cleared", origin=origin))
            session.enforce(DEFAULT_INVARIANTS)
            save_retrying(self.store, session)
            self.forget(key)
            return session.id

        return self._retrying(key, "starting a new generation", attempt)

    async def clear(self, key: str) -> uuid.UUID:
        return await self._off_loop(key, lambda: self.clear_sync(key))

    # ------------------------------------------------------------ the /compact command

    def command_sync(self, key: str, text: str, worker: WorkerLoop | None = None) -> CommandResult | None:
        """Run ``text`` as the ``/compact`` command on ``key``'s session when it is one (None
        otherwise): ``command/run``, the manual compaction, ``command/done``, each saved as it is
        appended; the answer is the command's one line. Blocking. Not retried: a command whose
        ``command/run`` is stored has run. ``worker``: cancels the command from another thread."""
        if not is_command(text):
            return None
        session = self.load_sync(key)
        try:
            return run_apart(
                handle_compact(
                    self.service_of(session),
                    session,
                    self.store,
                    text,
                    custom_instructions=self.custom_instructions,
                ),
                worker,
            )
        finally:
            self.forget(key)  # the command saved as it went; read it back next time

    async def command(self, key: str, text: str) -> CommandResult | None:
        """:meth:`command_sync` in a worker thread, under ``key``'s lock. Cancelled, it cancels
        the command (as the agent loop's is: the compaction's ``compact/end`` and ``command/done``
        record the cancellation, the surface is untouched) and returns once that is stored."""
        if not is_command(text):
            return None
        worker = WorkerLoop()
        return await self._off_loop(key, lambda: self.command_sync(key, text, worker), worker)

    # ------------------------------------------------------------ reading

    def surface_sync(self, key: str) -> list[Message]:
        """The messages the model is to see, compacted first when over the threshold. Blocking:
        the compaction runs in an event loop of its own (:func:`run_apart`)."""
        return self.compacted_sync(key).after

    async def surface(self, key: str) -> list[Message]:
        """:meth:`surface_sync` in a worker thread, under ``key``'s lock."""
        return await self._off_loop(key, lambda: self.surface_sync(key))

    def compacted_sync(self, key: str) -> Compacted:
        """The surface before and after compacting it when it is over the threshold, and every
        message the log holds. Blocking."""

        def attempt() -> Compacted:
            session = self.load_sync(key)
            if session.saved_length == 0:
                return Compacted([], [], Recorded())
            before = len(session)
            messages = session.derive_messages()
            run_apart(self.compact(session))
            after = messages if len(session) == before else session.derive_messages()
            return Compacted(messages, after, self.recorded(session))

        return self._retrying(key, "compacting", attempt)

    async def compacted(self, key: str) -> Compacted:
        """:meth:`compacted_sync` in a worker thread, under ``key``'s lock."""
        return await self._off_loop(key, lambda: self.compacted_sync(key))

    async def view(self, key: str, render: Callable[[Compacted], T]) -> T:
        """``render`` of :meth:`compacted_sync`, both in the worker thread: an adapter turns the
        surface into its framework's messages there, not on the event loop."""
        return await self._off_loop(key, lambda: render(self.compacted_sync(key)))

    async def compact(self, session: Session) -> None:
        """Compact ``session`` when it is over the threshold: inside its open turn when one is
        open (automatic), else between turns. A compaction failure is logged; the surface stays
        valid. A :class:`ConcurrencyError` propagates (the caller reloads and retries)."""
        try:
            if session.open_turn is not None:
                result = await self.service_of(session).compact_if_needed(session, store=self.store)
                results = [result] if result is not None else []
            else:
                results = await self.service_of(session).compact_to_threshold(session, store=self.store)
        except CompactionError as e:
            if isinstance(e.__cause__, ConcurrencyError):
                raise e.__cause__ from e
            log.warning("compaction of session %s failed: %s; the surface is sent as it is", session.id, e)
            return
        self.compactions.extend(results)


# ---------------------------------------------------------------- the framework's model, on its loop


class LoopSummarizer(Summarizer):
    """A summarizer of the caller's event loop (a framework's own model, whose client belongs to
    that loop), called from the worker thread the compaction runs in: the request is sent back to
    ``loop`` and awaited there; the output is the inner summarizer's, so completion, the fidelity
    gate and the audit treat it as any other."""

    def __init__(self, inner: Summarizer) -> None:
        self.inner = inner
        self.provider = inner.provider
        self.model = inner.model
        self.loop: asyncio.AbstractEventLoop | None = None

    async def summarize(self, request: SummaryRequest) -> SummaryOutput:
        loop, here = self.loop, asyncio.get_running_loop()
        if loop is None or loop is here or loop.is_closed() or not loop.is_running():
            return await self.inner.summarize(request)
        future = asyncio.run_coroutine_threadsafe(self.inner.summarize(request), loop)
        return await asyncio.wrap_future(future)

    async def aclose(self) -> None:
        await self.inner.aclose()


class WorkerLoop:
    """The event loop and task :func:`run_apart` runs a coroutine in, so another thread can cancel
    it (:meth:`cancel`, before, while or after it runs)."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._running: tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]] | None = None
        self.cancelled = False

    def attach(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
        with self._guard:
            self._running = (loop, task)
            if self.cancelled:
                task.cancel()

    def detach(self) -> None:
        with self._guard:
            self._running = None

    def cancel(self) -> None:
        with self._guard:
            self.cancelled = True
            if self._running is not None:
                loop, task = self._running
                loop.call_soon_threadsafe(task.cancel)


def run_apart(work: Coroutine[Any, Any, T], worker: WorkerLoop | None = None) -> T:
    """``work`` to completion in an event loop of its own, leaving this thread's current loop (a
    framework's, e.g. the one ``run_sync`` keeps) as it was, which :func:`asyncio.run` would unset.
    ``worker`` lets another thread cancel ``work``; the cancellation is raised here."""
    loop = asyncio.new_event_loop()
    try:
        task = loop.create_task(work)
        if worker is not None:
            worker.attach(loop, task)
        try:
            return loop.run_until_complete(task)
        finally:
            if worker is not None:
                worker.detach()
    finally:
        loop.close()


def is_command(text: object) -> bool:
    """Whether ``text`` is the ``/compact`` command (``/compact`` or ``/compact <arguments>``)."""
    parsed = parse_command(text) if isinstance(text, str) else None
    return parsed is not None and parsed[0] == COMPACT


def owner_of(session: Session) -> str | None:
    """The framework that made ``session``: the provider of its first ``request/header``."""
    for event in session.events():
        if isinstance(event, RequestHeader):
            return event.provider
    return None


def generation_id(framework: str, key: str, generation: int) -> uuid.UUID:
    """The session id of ``key``'s ``generation``-th surface in ``framework`` (a UUID key is its
    own generation 0, in any framework: see :func:`owner_of`)."""
    if generation == 0:
        try:
            return uuid.UUID(key)
        except ValueError:
            pass
    return uuid.uuid5(NAMESPACE, f"{framework}\x1f{key}#{generation}")
