"""The sessions the service hosts: every operation of the API over one :class:`SessionStore`.

The store is synchronous, so each operation runs in a worker thread (:meth:`Host.call`), never on
the event loop, under the session's :class:`asyncio.Lock` (one writer per session in this process;
writers in other processes are kept apart by the store's optimistic concurrency on ``seq``). A
cancelled request (the client went away, the server shuts down) does not cancel its save: the
lock is held until the worker thread is done, so what it stores is stored before the session's
next request reads it.

The version of a session is its number of stored events; it is the ETag of every read and write
and the precondition of ``If-Match``. Loaded sessions are kept (the ``keep`` most recently used)
and reused while the store holds no event past them (one query, ``stream_length``), so another
process's appends are always seen. A request that fails after appending in memory drops the
session from the cache: nothing it appended is kept, and the next request reads the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TypeVar
from uuid import UUID

from compaction.engine.meters import HeuristicMeter
from compaction.errors import (
    BadRequestError,
    CompactionError,
    ConcurrencyError,
    SessionNotFoundError,
    SessionStateError,
)
from compaction.integrations.openai_agents import to_items
from compaction.serve import items
from compaction.serve.shapes import (
    JSON,
    Append,
    Appended,
    Compacted,
    CompactRequest,
    Format,
    NewSession,
    SessionInfo,
    SessionList,
    Surface,
)
from compaction.service import BasicCompactService, known_window
from compaction.sessions.blocks import Message
from compaction.sessions.events import RequestHeader, ToolSpec, TurnEnd, TurnEndReason, TurnStart
from compaction.sessions.invariants import DEFAULT_INVARIANTS
from compaction.sessions.native import StoredExport
from compaction.sessions.render import to_anthropic, to_openai, to_text
from compaction.sessions.retry import save_retrying
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.contract import CompactionResult

T = TypeVar("T")

STORE_SECONDS: contextvars.ContextVar[float] = contextvars.ContextVar("store_seconds", default=0.0)
"""The seconds the current request spent in :meth:`Host.call` (the lock, the worker thread and the
store work), reported as ``Server-Timing: store;dur=MS``: the rest of a request's time is the
HTTP layer's."""

CREATED = "POST /v1/sessions"
"""The origin of the events that create a session: the ``session/invariants`` marker, then a turn
holding the ``request/header`` the session was created with (provider, model, window, system,
tools), which every later model call inherits."""
HEADER_SEQ = 2
"""Where a session the service created holds its creation header (after the marker and turn/start)."""
REPLAY_SCAN = 512
"""How far back an ``Idempotency-Key`` without ``If-Match`` is looked for in the log."""


def idempotency_marker(key: str) -> str:
    return f"[idempotency-key={key}]"


class Host:
    """The store, the loaded sessions, the per-session locks and the compaction engines."""

    def __init__(self, store: SessionStore, *, keep: int = 4096) -> None:
        self.store = store
        self.keep = keep
        self.meter = HeuristicMeter()
        self._kept: OrderedDict[UUID, Session] = OrderedDict()
        self._guard = threading.Lock()
        self._locks: weakref.WeakValueDictionary[UUID, asyncio.Lock] = weakref.WeakValueDictionary()
        self._engines: dict[int, tuple[BasicCompactService, threading.Lock]] = {}

    # ------------------------------------------------------------ running store work

    async def call(self, session_id: UUID | None, work: Callable[[], T]) -> T:
        """``work`` in a worker thread, under ``session_id``'s lock (when given). Cancelled, it
        waits for the thread to finish before the lock is let go, then re-raises."""
        began = time.perf_counter()
        try:
            return await self._call(session_id, work)
        finally:
            STORE_SECONDS.set(STORE_SECONDS.get() + time.perf_counter() - began)

    async def _call(self, session_id: UUID | None, work: Callable[[], T]) -> T:
        async with self._locked(session_id):
            running = asyncio.ensure_future(asyncio.to_thread(work))
            try:
                return await asyncio.shield(running)
            except asyncio.CancelledError:
                with contextlib.suppress(BaseException):
                    await asyncio.wait([running])
                raise

    @contextlib.asynccontextmanager
    async def _locked(self, session_id: UUID | None) -> AsyncIterator[None]:
        if session_id is None:
            yield
            return
        lock = self._locks.get(session_id)
        if lock is None:
            lock = self._locks[session_id] = asyncio.Lock()
        async with lock:
            yield

    # ------------------------------------------------------------ loading

    def load(self, session_id: UUID) -> Session:
        """The stored session, from the cache while the store holds nothing past it."""
        with self._guard:
            kept = self._kept.get(session_id)
        if kept is not None and self.store.stream_length(session_id) == kept.saved_length:
            with self._guard:
                self._kept.move_to_end(session_id)
            return kept
        if not self.store.exists(session_id):
            self.forget(session_id)
            raise SessionNotFoundError(session_id)
        return self._keep(self.store.get(session_id))

    def _keep(self, session: Session) -> Session:
        with self._guard:
            self._kept[session.id] = session
            self._kept.move_to_end(session.id)
            while len(self._kept) > self.keep:
                self._kept.popitem(last=False)
        return session

    def forget(self, session_id: UUID) -> None:
        with self._guard:
            self._kept.pop(session_id, None)

    @contextlib.contextmanager
    def _writing(self, session_id: UUID) -> Iterator[None]:
        """Whatever fails, the session is read from the store next time (its unsaved events gone)."""
        try:
            yield
        except BaseException:
            self.forget(session_id)
            raise

    # ------------------------------------------------------------ sessions

    def create(self, spec: NewSession) -> SessionInfo:
        session_id = spec.id or uuid.uuid4()
        window = spec.window or known_window(spec.model)
        if window is None:
            raise BadRequestError(
                f"window: expected the context window of {spec.provider}/{spec.model} in tokens; "
                "found none, and the window table does not know the model"
            )
        if self.store.exists(session_id):
            raise SessionStateError(f"session {session_id} exists already; expected a new session id")
        session = self.store.create(session_id, invariants=DEFAULT_INVARIANTS)
        tools = tuple(ToolSpec(t.name, t.description, t.parameters) for t in spec.tools)
        header = RequestHeader(
            provider=spec.provider,
            model=spec.model,
            system=spec.system,
            tools=tools,
            context_window=window,
            origin=CREATED,
        )
        completed = TurnEndReason(kind="completed")
        session.append_all(
            [TurnStart(turn=1, origin=CREATED), header, TurnEnd(turn=1, reason=completed, origin=CREATED)]
        )
        with self._writing(session_id):
            save_retrying(self.store, session)
        return self.info(self._keep(session))

    def info(self, session: Session) -> SessionInfo:
        header = session.latest_header()
        return SessionInfo(
            id=session.id,
            version=session.saved_length,
            provider=header.provider if header else None,
            model=header.model if header else None,
            window=self.window(session),
            surface_nodes=len(session.nodes),
            open_turn=session.open_turn,
        )

    def window(self, session: Session) -> int | None:
        """The window recorded on the latest header, else on the creation header, else the
        window table's for the model."""
        header = session.latest_header()
        if header is not None and header.context_window:
            return header.context_window
        if len(session) > HEADER_SEQ:
            created = session.event(HEADER_SEQ)
            if isinstance(created, RequestHeader) and created.context_window:
                return created.context_window
        return known_window(header.model) if header is not None else None

    def listed(self, prefix: str, after: str | None, limit: int, query: str | None) -> SessionList:
        """Sessions in id order, from after ``after``, whose id starts with ``prefix`` and whose
        surface text holds ``query`` (case-insensitive; each candidate is loaded to look, from the
        store: the loaded sessions belong to their writers)."""
        ids = sorted(str(i) for i in self.store.all_session_ids())
        found: list[SessionInfo] = []
        last: str | None = None
        for text in ids:
            if not text.startswith(prefix) or (after is not None and text <= after):
                continue
            if len(found) == limit:
                return SessionList(found, last)
            session = self.store.get(UUID(text))  # not the cached one: a writer may hold it
            if query is None or query.lower() in to_text(session.derive_messages()).lower():
                found.append(self.info(session))
            last = text
        return SessionList(found, None)

    # ------------------------------------------------------------ appending

    def append(self, session_id: UUID, body: Append, if_match: int | None, key: str | None) -> Appended:
        session = self.load(session_id)
        if if_match is not None and if_match != session.saved_length:
            self.forget(session_id)
            session = self.load(session_id)
        if key is not None:
            replayed = self._replayed(session, key, if_match)
            if replayed is not None:
                return replayed
        _check_version(session, if_match)
        origin = f"POST /v1/sessions/{session_id}/items at version {session.saved_length}"
        if key is not None:
            origin = f"{origin} {idempotency_marker(key)}"
        first = session.saved_length
        with self._writing(session_id):
            count = items.record(session, body.format, body.items, origin)
            save_retrying(self.store, session)
        return Appended(session_id, session.saved_length, first, count)

    def _replayed(self, session: Session, key: str, if_match: int | None) -> Appended | None:
        """The append an earlier request with ``key`` stored (a retry after a lost answer), or
        None: looked for from ``if_match`` on when given, else in the last events of the log."""
        marker = idempotency_marker(key)
        end = session.saved_length
        if if_match is not None:
            seqs = range(min(if_match, end), min(if_match + REPLAY_SCAN, end))
        else:
            seqs = range(max(0, end - REPLAY_SCAN), end)
        marked = [seq for seq in seqs if marker in (session.event(seq).origin or "")]
        if not marked:
            return None
        return Appended(session.id, end, marked[0], marked[-1] - marked[0] + 1, replayed=True)

    # ------------------------------------------------------------ reading

    def surface(self, session_id: UUID, format: Format, at: int | None) -> Surface:
        """The surface now (or right after seq ``at``: a replay) in ``format``, ready to send."""
        session = self.load(session_id)
        version = session.saved_length
        if at is not None:
            if at >= version:
                raise BadRequestError(
                    f"?at={at}: expected a seq of session {session_id} (0..{version - 1}); found {at}"
                )
            session = self.store.get(session_id, at=at)
        header = session.latest_header()
        system = header.system if header is not None else None
        return Surface(
            id=session_id,
            version=version,
            at=len(session) - 1,
            format=format,
            system=system,
            messages=rendered(session.derive_messages(), format, system),
            tokens=self.meter.measure(session).total_tokens,
            window=self.window(session),
        )

    def export(self, session_id: UUID) -> StoredExport:
        """The session's export as the store holds it now, to be read window by window
        (:class:`StoredExport`): neither the cached session nor the whole log in memory."""
        return StoredExport.of(self.store, session_id)

    # ------------------------------------------------------------ compacting

    def compact(self, session_id: UUID, request: CompactRequest, if_match: int | None) -> Compacted:
        session = self.load(session_id)
        _check_version(session, if_match)
        window = request.window or self.window(session)
        if window is None:
            raise BadRequestError(f"window: expected the context window of session {session_id}; found none")
        engine, lock = self._engine(window)
        with self._writing(session_id), lock:
            before = engine.meter.measure(session).total_tokens
            results = asyncio.run(_compacted(engine, session, request, self.store))
            after = engine.meter.measure(session).total_tokens
        return Compacted(session_id, session.saved_length, request.mode, results, before, after, window)

    def _engine(self, window: int) -> tuple[BasicCompactService, threading.Lock]:
        """One engine per window (its read-ahead kept across requests), used by one compaction at
        a time (the engine's per-session state is not shared between threads)."""
        with self._guard:
            found = self._engines.get(window)
            if found is None:
                engine = BasicCompactService(BasicConfig(context_window=window))
                found = self._engines[window] = (engine, threading.Lock())
            return found


def _check_version(session: Session, if_match: int | None) -> None:
    """``If-Match`` against the stored version: behind it, another writer stored events since
    (:class:`ConcurrencyError`); past it, a version the session never had."""
    stored = session.saved_length
    if if_match is None or if_match == stored:
        return
    if if_match > stored:
        raise BadRequestError(
            f"If-Match: expected a version of session {session.id} (at most {stored}); found {if_match}"
        )
    raise ConcurrencyError(session.id, if_match, stored - 1)


async def _compacted(
    engine: BasicCompactService, session: Session, request: CompactRequest, store: SessionStore
) -> list[CompactionResult]:
    """Manual: one compaction now (between turns). If needed: under pressure only; inside an open
    turn as the agent loop does before a model call, else down to the threshold. A commit refused
    because another writer appended first is that writer's :class:`ConcurrencyError`."""
    try:
        if request.mode == "manual":
            found = await engine.compact_now(session, store=store, focus=request.focus)
            return [found] if found is not None else []
        if session.open_turn is not None:
            found = await engine.compact_if_needed(session, store=store)
            return [found] if found is not None else []
        return await engine.compact_to_threshold(session, store=store)
    except CompactionError as e:
        if isinstance(e.__cause__, ConcurrencyError):
            raise e.__cause__ from e
        raise


def rendered(messages: list[Message], format: Format, system: str | None) -> list[JSON]:
    if format == "openai":
        return to_openai(messages, system)
    if format == "anthropic":
        return to_anthropic(messages)
    return to_items(messages)
