"""The JSON the service reads and writes, as msgspec Structs: decoding a request body checks its
shape (a missing or mistyped field is a :class:`~compaction.errors.BadRequestError` naming it),
and the OpenAPI document's schemas are generated from these same Structs
(:mod:`compaction.serve.openapi`)."""

from __future__ import annotations

from typing import Any, Literal
from uuid import UUID

import msgspec

from compaction.vocabulary.contract import CompactionResult

Format = Literal["openai", "anthropic", "responses"]
JSON = dict[str, Any]


class Tool(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A tool the model is offered, as recorded on the session's ``request/header``."""

    name: str
    description: str = ""
    parameters: JSON = msgspec.field(default_factory=dict)


class NewSession(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``POST /v1/sessions``: the request envelope the session starts with."""

    provider: str
    model: str
    window: int | None = None
    """The model's context window in tokens (default: the window table's for ``model``)."""
    system: str | None = None
    tools: list[Tool] = msgspec.field(default_factory=list)
    id: UUID | None = None
    """The session id to use (default: a new random one)."""


class Append(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``POST /v1/sessions/{id}/items``: items of one provider shape, stored all or nothing."""

    format: Format
    items: list[Any]


class CompactRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``POST /v1/sessions/{id}/compact``: ``manual`` compacts now (between turns); ``if_needed``
    compacts when the request total is over the threshold of ``window`` (before a model call)."""

    mode: Literal["manual", "if_needed"] = "if_needed"
    window: int | None = None
    focus: str | None = None
    """What a manual summary should keep in focus (the ``/compact <text>`` of the agent loop)."""


class SessionInfo(msgspec.Struct, frozen=True):
    """A session as listed and created: its version is the number of stored events (the ETag)."""

    id: UUID
    version: int
    provider: str | None
    model: str | None
    window: int | None
    surface_nodes: int
    open_turn: int | None


class SessionList(msgspec.Struct, frozen=True):
    sessions: list[SessionInfo]
    next_after: str | None
    """Pass as ``after`` for the next page (null: this was the last one)."""


class Appended(msgspec.Struct, frozen=True):
    """What an append stored: seqs ``first_seq..version-1``; ``replayed`` when an earlier request
    with the same ``Idempotency-Key`` had stored them (nothing was stored again)."""

    id: UUID
    version: int
    first_seq: int
    events: int
    replayed: bool = False


class Surface(msgspec.Struct, frozen=True):
    """The surface rendered for a provider, ready to send: ``messages`` (OpenAI: the system
    prompt first), ``system`` (Anthropic's top-level parameter, the Responses ``instructions``)."""

    id: UUID
    version: int
    at: int
    format: Format
    system: str | None
    messages: list[JSON]
    tokens: int
    window: int | None


class Compacted(msgspec.Struct, frozen=True):
    """What a compact request did: each committed compaction as the library's
    :class:`~compaction.vocabulary.contract.CompactionResult` (empty: nothing needed compacting)."""

    id: UUID
    version: int
    mode: Literal["manual", "if_needed"]
    compactions: list[CompactionResult]
    tokens_before: int
    tokens_after: int
    window: int


class Health(msgspec.Struct, frozen=True):
    status: Literal["ok"]


class Ready(msgspec.Struct, frozen=True):
    status: Literal["ready", "unavailable"]
    backend: str
    last_notification: int | None = None
    error: str | None = None


class ErrorDetail(msgspec.Struct, frozen=True):
    type: str
    """The library's error class name (``ConcurrencyError``, ``IntegrationError``, ...)."""
    message: str
    status: int


class ErrorBody(msgspec.Struct, frozen=True):
    error: ErrorDetail


class StreamedEvent(msgspec.Struct, frozen=True):
    """One committed event on the stream (``data:`` of an SSE message whose ``id:`` is
    ``notification_id``): the session it belongs to and the event in the native export's line
    shape (``seq``, ``type``, ``time``, ``payload``, ``surface_op``, ``source_event_seqs``, ``hash``)."""

    notification_id: int
    session_id: UUID
    event: JSON


SCHEMAS: tuple[type, ...] = (
    NewSession,
    Append,
    CompactRequest,
    SessionInfo,
    SessionList,
    Appended,
    Surface,
    Compacted,
    Health,
    Ready,
    ErrorBody,
    StreamedEvent,
)
"""Every shape the OpenAPI document names (their schemas come from the Structs)."""
