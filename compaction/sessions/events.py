"""The session event vocabulary: immutable msgspec Structs, one class per event type.

Every event carries ``seq`` (its position in the session log, contiguous from 0) and ``time``
(timezone-aware UTC). Surface types (``user/message``, ``assistant/message``, ``tool/result``,
``context/message``, ``steering/message``) must carry ``surface_op``; log-only types must not carry
``surface_op`` or ``source_event_seqs``.

The registry is open: another package subclasses :class:`SessionEvent`, sets ``TYPE`` and calls
:func:`register_event_type` (compaction adds ``compact/*`` this way). Reading a stored type that
nobody registered raises :class:`~compaction.errors.UnknownEventTypeError`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar, Literal, TypeVar

import msgspec

from compaction.errors import UnknownEventTypeError
from compaction.sessions.blocks import Message, ToolCallBlock

UNSET_SEQ = -1
UNSET_TIME = datetime(1970, 1, 1, tzinfo=UTC)


class Replace(msgspec.Struct, frozen=True, tag="replace", tag_field="op"):
    """Positional, inclusive replacement of the surface nodes ``start``..``end``."""

    start: int
    end: int


APPEND: Literal["append"] = "append"
SurfaceOp = Literal["append"] | Replace


class SessionEvent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Base of every event. ``seq`` and ``time`` are assigned by :meth:`Session.append`."""

    TYPE: ClassVar[str] = ""
    SURFACE: ClassVar[bool] = False

    seq: int = UNSET_SEQ
    time: datetime = UNSET_TIME
    surface_op: SurfaceOp | None = None
    source_event_seqs: tuple[int, ...] | None = None
    origin: str | None = None  # where an imported event came from (file line, uuid)

    @property
    def type(self) -> str:
        return self.TYPE


# ---------------------------------------------------------------- surface event types


class UserMessage(SessionEvent, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = "user/message"
    SURFACE: ClassVar[bool] = True
    message: Message


class Usage(msgspec.Struct, frozen=True, omit_defaults=True):
    """Provider-reported usage, disjoint buckets."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def total(self) -> int:
        return (
            self.input_tokens
            + self.cache_read_tokens
            + self.cache_write_tokens
            + self.output_tokens
        )


class AssistantMessage(SessionEvent, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = "assistant/message"
    SURFACE: ClassVar[bool] = True
    turn: int
    step: int
    message: Message
    usage: Usage | None = None
    interrupted: bool = False


class ToolError(msgspec.Struct, frozen=True):
    name: str
    code: str


class ToolResult(SessionEvent, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = "tool/result"
    SURFACE: ClassVar[bool] = True
    turn: int
    step: int
    message: Message
    error: ToolError | None = None
    meta: dict[str, Any] | None = None
    synthesized: bool = False  # made up by an importer or crash repair, not produced by a tool


class ContextMessage(SessionEvent, frozen=True, kw_only=True):
    """Context injected by the harness (files, memories); user-role on the surface."""

    TYPE: ClassVar[str] = "context/message"
    SURFACE: ClassVar[bool] = True
    message: Message


class SteeringMessage(SessionEvent, frozen=True, kw_only=True):
    """A user message that steers a turn already under way."""

    TYPE: ClassVar[str] = "steering/message"
    SURFACE: ClassVar[bool] = True
    message: Message


# ---------------------------------------------------------------- log-only event types


class TurnStart(SessionEvent, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = "turn/start"
    turn: int


TurnEndKind = Literal["completed", "aborted", "error", "max-tokens", "interrupted"]


class TurnEndReason(msgspec.Struct, frozen=True, omit_defaults=True):
    kind: TurnEndKind
    message: str | None = None
    code: str | None = None


class TurnEnd(SessionEvent, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = "turn/end"
    turn: int
    reason: TurnEndReason


class StepStart(SessionEvent, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = "step/start"
    turn: int
    step: int


class StepEnd(SessionEvent, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = "step/end"
    turn: int
    step: int


class AssistantChunk(SessionEvent, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = "assistant/chunk"
    turn: int
    step: int
    chunk: str


class ToolCall(SessionEvent, frozen=True, kw_only=True):
    """Log-only record that the harness dispatched a tool call."""

    TYPE: ClassVar[str] = "tool/call"
    turn: int
    step: int
    call_id: str
    name: str
    arguments: str


class ToolSpec(msgspec.Struct, frozen=True, omit_defaults=True):
    name: str
    description: str = ""
    parameters: dict[str, Any] = msgspec.field(default_factory=dict)


class RequestHeader(SessionEvent, frozen=True, kw_only=True):
    """A full snapshot of the request envelope; the latest one wins."""

    TYPE: ClassVar[str] = "request/header"
    provider: str
    model: str
    system: str | None = None
    tools: tuple[ToolSpec, ...] = ()
    context_window: int | None = None
    reason: Literal["initial", "resume", "change"] = "initial"


class SessionResume(SessionEvent, frozen=True, kw_only=True):
    """A new process lifecycle took the session over (makes older unmatched locks stale)."""

    TYPE: ClassVar[str] = "session/resume"
    host: str | None = None
    pid: int | None = None


# ---------------------------------------------------------------- registry

E = TypeVar("E", bound=type[SessionEvent])

_REGISTRY: dict[str, type[SessionEvent]] = {}


def register_event_type(cls: E) -> E:
    """Add an event class to the registry under its ``TYPE`` (usable as a decorator)."""
    if not cls.TYPE:
        raise ValueError(f"{cls.__qualname__} has no TYPE")
    existing = _REGISTRY.get(cls.TYPE)
    if existing is not None and existing is not cls:
        raise ValueError(
            f"event type {cls.TYPE!r} is already registered to {existing.__qualname__}; "
            "never reuse a type name for a different shape"
        )
    _REGISTRY[cls.TYPE] = cls
    return cls


def event_class(event_type: str, where: str = "") -> type[SessionEvent]:
    try:
        return _REGISTRY[event_type]
    except KeyError:
        raise UnknownEventTypeError(event_type, where) from None


def registered_types() -> dict[str, type[SessionEvent]]:
    return dict(_REGISTRY)


def is_surface_type(event_type: str) -> bool:
    cls = _REGISTRY.get(event_type)
    return cls is not None and cls.SURFACE


for _cls in (
    UserMessage,
    AssistantMessage,
    ToolResult,
    ContextMessage,
    SteeringMessage,
    TurnStart,
    TurnEnd,
    StepStart,
    StepEnd,
    AssistantChunk,
    ToolCall,
    RequestHeader,
    SessionResume,
):
    register_event_type(_cls)

SurfaceEvent = UserMessage | AssistantMessage | ToolResult | ContextMessage | SteeringMessage
MessageEvent = (UserMessage, AssistantMessage, ToolResult, ContextMessage, SteeringMessage)


def message_of(event: SessionEvent) -> Message | None:
    """The message a surface event carries, or None for log-only events."""
    return getattr(event, "message", None) if event.SURFACE else None


def tool_call_count(event: SessionEvent) -> int:
    """Tool-pairing delta of a surface node (spec §c)."""
    if isinstance(event, AssistantMessage):
        return sum(1 for b in event.message.content if isinstance(b, ToolCallBlock))
    if isinstance(event, ToolResult):
        return -1
    return 0


def now_utc() -> datetime:
    return datetime.now(UTC)
