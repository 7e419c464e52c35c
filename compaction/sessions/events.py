"""The session event vocabulary: immutable msgspec Structs, one class per event type.

Every event carries ``seq`` (its position in the session log, contiguous from 0) and ``time``
(timezone-aware UTC). Surface types (``user/message``, ``assistant/message``, ``tool/result``,
``context/message``, ``steering/message``) must carry ``surface_op``; log-only types must not carry
``surface_op`` or ``source_event_seqs``.

The registry is open: another package subclasses :class:`SessionEvent`, sets ``TYPE`` and calls
:func:`register_event_type`. Types defined above this package are resolved on demand, the way
eventsourcing resolves topics: :data:`EVENT_TOPICS` names the class of each (``module:Class``), and
the first read of such a type imports that module, whose class registers itself. A process that
imports only :mod:`compaction.sessions` thus decodes every stored event, and importing it loads
nothing above it. Reading a type that is neither registered nor named by a topic raises
:class:`~compaction.errors.UnknownEventTypeError`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, ClassVar, Literal, NoReturn, TypeVar

import msgspec
import msgspec.inspect as mi
from eventsourcing.utils import TopicError, resolve_topic

from compaction.errors import EventVersionError, UnknownEventTypeError
from compaction.sessions.blocks import Message, ToolCallBlock

UNSET_SEQ = -1
UNSET_TIME = datetime(1970, 1, 1, tzinfo=UTC)


# ``gc=False`` (not tracked by the garbage collector, which would otherwise walk every event of every
# live session at each full collection) is set only on the classes whose fields are, by type,
# strings, numbers, datetimes, ``None``, tuples of these and ``gc=False`` Structs
# (:mod:`compaction.sessions.blocks`): each is frozen and a tuple is built before the Struct that
# holds it, so no instance can reference itself or a container that references it. The classes
# with free-form payloads (``ToolResult.meta``, ``ToolSpec.parameters``, and :class:`SessionEvent`
# itself, whose subclasses elsewhere may carry ``Any``) stay tracked: msgspec leaves an instance
# untracked anyway while none of its fields holds a tracked object (a tool result without ``meta``).


class Replace(msgspec.Struct, frozen=True, gc=False, tag="replace", tag_field="op"):
    """Positional, inclusive replacement of the surface nodes ``start``..``end``."""

    start: int
    end: int


APPEND: Literal["append"] = "append"
SurfaceOp = Literal["append"] | Replace


class SessionEvent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Base of every event. ``seq`` and ``time`` are assigned by :meth:`Session.append`."""

    TYPE: ClassVar[str] = ""
    SURFACE: ClassVar[bool] = False
    class_version: ClassVar[int] = 1
    """The shape's version, eventsourcing's convention: a class that changes its stored shape
    raises it and defines ``upcast_vN_vN+1(state: dict) -> None`` static methods that rewrite a
    stored payload of version N in place (:func:`upcast_state`); stored rows of a version above 1
    carry ``class_version`` (:mod:`compaction.sessions.mapper`)."""

    seq: int = UNSET_SEQ
    time: datetime = UNSET_TIME
    surface_op: SurfaceOp | None = None
    source_event_seqs: tuple[int, ...] | None = None
    origin: str | None = None  # where an imported event came from (file line, uuid)

    @property
    def type(self) -> str:
        return self.TYPE


# ---------------------------------------------------------------- surface event types


class UserMessage(SessionEvent, frozen=True, gc=False, kw_only=True):
    TYPE: ClassVar[str] = "user/message"
    SURFACE: ClassVar[bool] = True
    message: Message


class Usage(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """Provider-reported usage, disjoint buckets."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens + self.output_tokens


class AssistantMessage(SessionEvent, frozen=True, gc=False, kw_only=True):
    TYPE: ClassVar[str] = "assistant/message"
    SURFACE: ClassVar[bool] = True
    turn: int
    step: int
    message: Message
    usage: Usage | None = None
    interrupted: bool = False


class ToolError(msgspec.Struct, frozen=True, gc=False):
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


class ContextMessage(SessionEvent, frozen=True, gc=False, kw_only=True):
    """Context injected by the harness (files, memories); user-role on the surface."""

    TYPE: ClassVar[str] = "context/message"
    SURFACE: ClassVar[bool] = True
    message: Message


class SteeringMessage(SessionEvent, frozen=True, gc=False, kw_only=True):
    """A user message that steers a turn already under way."""

    TYPE: ClassVar[str] = "steering/message"
    SURFACE: ClassVar[bool] = True
    message: Message


# ---------------------------------------------------------------- log-only event types


class TurnStart(SessionEvent, frozen=True, gc=False, kw_only=True):
    TYPE: ClassVar[str] = "turn/start"
    turn: int


TurnEndKind = Literal["completed", "aborted", "error", "max-tokens", "interrupted"]


class TurnEndReason(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    kind: TurnEndKind
    message: str | None = None
    code: str | None = None


class TurnEnd(SessionEvent, frozen=True, gc=False, kw_only=True):
    TYPE: ClassVar[str] = "turn/end"
    turn: int
    reason: TurnEndReason


class StepStart(SessionEvent, frozen=True, gc=False, kw_only=True):
    TYPE: ClassVar[str] = "step/start"
    turn: int
    step: int


class StepEnd(SessionEvent, frozen=True, gc=False, kw_only=True):
    TYPE: ClassVar[str] = "step/end"
    turn: int
    step: int


class AssistantChunk(SessionEvent, frozen=True, gc=False, kw_only=True):
    TYPE: ClassVar[str] = "assistant/chunk"
    turn: int
    step: int
    chunk: str


class ToolCall(SessionEvent, frozen=True, gc=False, kw_only=True):
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


ResumeReason = Literal["restart", "cleared", "unknown"]


class SessionResume(SessionEvent, frozen=True, gc=False, kw_only=True):
    """A new process lifecycle took the session over (makes older unmatched locks stale).

    Version 2 says why (``reason``): a process restarted, or the conversation was cleared. Rows
    of version 1 did not say; they read as ``"unknown"`` (:meth:`upcast_v1_v2`), not as the
    default a new event gets."""

    TYPE: ClassVar[str] = "session/resume"
    class_version: ClassVar[int] = 2
    host: str | None = None
    pid: int | None = None
    reason: ResumeReason = "restart"

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        state["reason"] = "unknown"


class SessionInvariants(SessionEvent, frozen=True, gc=False, kw_only=True):
    """The invariants in force from here on, by name (:mod:`compaction.sessions.invariants`).

    Every event after this one is checked by each named invariant at append and again on load; the
    events before it are not (logs written before an invariant existed keep loading). A later
    marker names every invariant in force, not only the new ones."""

    TYPE: ClassVar[str] = "session/invariants"
    names: tuple[str, ...]


class CommandRun(SessionEvent, frozen=True, gc=False, kw_only=True):
    """A user command (``/compact``) about to run instead of a model step."""

    TYPE: ClassVar[str] = "command/run"
    command_id: str
    name: str
    args: str = ""
    source: str = "user"


class CommandDone(SessionEvent, frozen=True, gc=False, kw_only=True):
    """The one-line answer of the command ``command_id`` (``kind``: success or error); the events
    between its ``command/run`` and this one that carry its id are what it did."""

    TYPE: ClassVar[str] = "command/done"
    command_id: str
    kind: Literal["success", "error"]
    text: str
    source_event_seq: int | None = None


# ---------------------------------------------------------------- registry

E = TypeVar("E", bound=type[SessionEvent])

_REGISTRY: dict[str, type[SessionEvent]] = {}


def register_event_type(cls: E) -> E:
    """Add an event class to the registry under its ``TYPE`` (usable as a decorator)."""
    if not cls.TYPE:
        raise ValueError(f"{cls.__qualname__} has no TYPE")
    if ":" in cls.TYPE:  # a stored topic with a colon is an eventsourcing topic (module:Class)
        raise ValueError(f"{cls.__qualname__}: TYPE {cls.TYPE!r} may not contain ':'")
    existing = _REGISTRY.get(cls.TYPE)
    if existing is not None and existing is not cls:
        raise ValueError(
            f"event type {cls.TYPE!r} is already registered to {existing.__qualname__}; "
            "never reuse a type name for a different shape"
        )
    _REGISTRY[cls.TYPE] = cls
    return cls


EVENT_TOPICS: dict[str, str] = {
    "compact/start": "compaction.vocabulary.events:CompactStart",
    "compact/summary": "compaction.vocabulary.events:CompactSummary",
    "compact/end": "compaction.vocabulary.events:CompactEnd",
    "compact/prune": "compaction.vocabulary.events:CompactPrune",
    "scratchpad/set": "compaction.vocabulary.events:ScratchpadSet",
    "phase/end": "compaction.vocabulary.events:PhaseEnd",
}
"""Event types whose classes live above this package, by stable type name: the topic
(``module:Class``) of each, resolved on the first read (:func:`register_event_topic` adds more)."""


def register_event_topic(event_type: str, topic: str) -> None:
    """Name the class of ``event_type`` by its topic, to be imported when a row first needs it."""
    known = EVENT_TOPICS.get(event_type)
    if known is not None and known != topic:
        raise ValueError(f"event type {event_type!r} already names topic {known!r}, not {topic!r}")
    EVENT_TOPICS[event_type] = topic


def event_class(event_type: str, where: str = "") -> type[SessionEvent]:
    """The class of ``event_type``: registered, or resolved from its topic on this first use."""
    cls = _REGISTRY.get(event_type)
    if cls is not None:
        return cls
    topic = EVENT_TOPICS.get(event_type)
    if topic is None:
        raise UnknownEventTypeError(event_type, where)
    try:
        resolved = resolve_topic(topic)
    except TopicError as e:
        raise UnknownEventTypeError(event_type, f"{where}: {e}" if where else str(e)) from e
    if not (isinstance(resolved, type) and issubclass(resolved, SessionEvent)):
        raise UnknownEventTypeError(event_type, f"topic {topic!r} names no session event class")
    if event_type != resolved.TYPE:
        raise UnknownEventTypeError(
            event_type, f"topic {topic!r} names {resolved.__qualname__}, whose TYPE is {resolved.TYPE!r}"
        )
    return register_event_type(resolved)


class UnknownEvent(SessionEvent, frozen=True, kw_only=True):
    """A stored event of a type no code in this process knows (no class registered, no topic, no
    ``compaction.event_types`` entry point): kept opaque and log-only, so the session still loads,
    lists, audits and folds. ``event_type`` is the stored type and ``payload`` the stored JSON,
    byte for byte (a copy to another store writes it back unchanged). Never stored under its own
    ``TYPE``; a store opened with ``strict_types`` refuses such rows instead."""

    TYPE: ClassVar[str] = "unknown"
    event_type: str
    payload: bytes

    @property
    def type(self) -> str:
        return self.event_type


def upcast_state(cls: type[SessionEvent], state: dict[str, Any]) -> dict[str, Any]:
    """``state`` (a stored payload, decoded to a dict) at ``cls.class_version``: its
    ``class_version`` key (1 when absent) removed and every ``upcast_vN_vN+1`` from there applied
    in turn, as eventsourcing's mapper does for its own events."""
    version = state.pop("class_version", 1)
    target = cls.class_version
    if not isinstance(version, int) or version > target:
        raise EventVersionError(
            cls.TYPE,
            f"event type {cls.TYPE!r}: the stored row is class_version {version!r} but "
            f"{cls.__qualname__} is version {target}; upgrade the package that defines it",
        )
    while version < target:
        upcast = getattr(cls, f"upcast_v{version}_v{version + 1}", None)
        if upcast is None:
            raise EventVersionError(
                cls.TYPE,
                f"event type {cls.TYPE!r}: no upcast_v{version}_v{version + 1} on "
                f"{cls.__qualname__} to bring a version {version} row to version {target}",
            )
        upcast(state)
        version += 1
    return state


def registered_types() -> dict[str, type[SessionEvent]]:
    """Every known event class, those named by a topic resolved now."""
    for event_type in tuple(EVENT_TOPICS):
        event_class(event_type)
    return dict(_REGISTRY)


def is_surface_type(event_type: str) -> bool:
    try:
        return event_class(event_type).SURFACE
    except UnknownEventTypeError:
        return False


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
    SessionInvariants,
    CommandRun,
    CommandDone,
):
    register_event_type(_cls)

SurfaceEvent = UserMessage | AssistantMessage | ToolResult | ContextMessage | SteeringMessage
MessageEvent = (UserMessage, AssistantMessage, ToolResult, ContextMessage, SteeringMessage)


def message_of(event: SessionEvent) -> Message | None:
    """The message a surface event carries, or None for log-only events."""
    return getattr(event, "message", None) if event.SURFACE else None


def tool_call_count(event: SessionEvent) -> int:
    """Tool-pairing delta of a surface node: +1 per tool call of an assistant message, -1 for a
    tool result, 0 otherwise."""
    if isinstance(event, AssistantMessage):
        return sum(1 for b in event.message.content if isinstance(b, ToolCallBlock))
    if isinstance(event, ToolResult):
        return -1
    return 0


def now_utc() -> datetime:
    return datetime.now(UTC)


# ---------------------------------------------------------------- deep immutability
#
# msgspec Structs are frozen, but a field may still hold the caller's list or dict. ``freeze``
# returns the event with every container replaced by an immutable one (tuples where the field is a
# tuple, read-only list/dict subclasses in free-form data such as ``meta``), so later changes to
# the caller's objects never reach the log. It costs almost nothing for events that are already
# frozen: each Struct class gets a plan naming only the fields whose type can hold a container.


def _read_only(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(f"{type(self).__name__} is read-only: logged events are immutable")


class FrozenDict(dict[str, Any]):
    """A read-only ``dict`` (equal to, and encoded like, a plain dict)."""

    __slots__ = ()
    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _read_only
    __ior__ = _read_only

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> FrozenDict:
        return self

    def __reduce__(self) -> tuple[object, ...]:
        return (_frozen_dict, (dict(self),))


class FrozenList(list[Any]):
    """A read-only ``list`` (equal to, and encoded like, a plain list)."""

    __slots__ = ()
    __setitem__ = __delitem__ = append = extend = insert = pop = remove = clear = _read_only
    sort = reverse = _read_only
    __iadd__ = __imul__ = _read_only

    def __copy__(self) -> FrozenList:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> FrozenList:
        return self

    def __reduce__(self) -> tuple[object, ...]:
        return (_frozen_list, (list(self),))


def _frozen_dict(data: dict[str, Any]) -> FrozenDict:
    return FrozenDict(data)


def _frozen_list(data: list[Any]) -> FrozenList:
    return FrozenList(data)


_ATOMS = frozenset({str, int, float, bool, bytes, datetime, type(None)})
_SCALARS, _ITEMS, _ANY = 0, 1, 2  # how a plan freezes a field: tuple(), per item, generic
_PLANS: dict[type, tuple[tuple[str, int], ...]] = {}


def freeze(value: Any) -> Any:
    """``value`` with every list, dict and tuple inside it made immutable (itself when it is)."""
    kind = type(value)
    if kind in _ATOMS or kind is FrozenDict or kind is FrozenList:
        return value
    if isinstance(value, msgspec.Struct):
        return freeze_struct(value)
    if kind is tuple:
        return _freeze_items(value)
    if isinstance(value, dict):
        if set(map(type, value.values())) <= _ATOMS:  # atoms only (a seq -> hash map): one copy
            return FrozenDict(value)
        return FrozenDict({k: freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple, set, frozenset)):
        return FrozenList(map(freeze, value))
    return value


def _freeze_items(value: Any) -> Any:
    """A tuple of frozen items (``value`` itself when it already is one)."""
    if type(value) is tuple:
        for item in value:
            kind = type(item)
            if kind not in _ATOMS and _PLANS.get(kind) != ():
                break
        else:
            return value
    items = tuple(map(freeze, value))
    if type(value) is tuple and all(a is b for a, b in zip(items, value, strict=True)):
        return value
    return items


def freeze_struct(value: msgspec.Struct) -> Any:
    """A Struct whose fields hold no mutable container (the same object when none did)."""
    cls = type(value)
    check = FROZEN_CHECKS.get(cls)
    if check is None:
        check = _checker(cls)
    if check(value):
        return value
    plan = _PLANS[cls]
    changes: dict[str, Any] | None = None
    for name, how in plan:
        current = getattr(value, name)
        if current is None:
            continue
        if how != _ANY and not isinstance(current, (list, tuple)):
            continue  # not a sequence at all: left for the rules to refuse, never guessed at
        if how == _SCALARS:
            if type(current) is tuple:
                continue
            frozen = tuple(current)
        elif how == _ITEMS:
            frozen = _freeze_items(current)
        else:
            frozen = freeze(current)
        if frozen is not current:
            if changes is None:
                changes = {}
            changes[name] = frozen
    return msgspec.structs.replace(value, **changes) if changes else value


FROZEN_CHECKS: dict[type, Callable[[Any], bool]] = {}
"""Per Struct class, a generated test that an instance is already deeply frozen (the fast path:
events decoded from a store or built from tuples pass it without a copy)."""


def _checker(cls: type) -> Callable[[Any], bool]:
    """Compile the frozen-test of ``cls`` from its plan (a few attribute reads and type checks)."""
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = _plan(cls)
    lines = ["def check(v):"]
    for index, (name, how) in enumerate(plan):
        x = f"x{index}"
        lines.append(f"    {x} = v.{name}")
        if how == _SCALARS:
            lines.append(f"    if {x} is not None and type({x}) is not tuple: return False")
        elif how == _ITEMS:
            lines += [
                f"    if {x} is not None:",
                f"        if type({x}) is not tuple: return False",
                f"        for i in {x}:",
                "            if type(i) not in plain and not settled(i): return False",
            ]
        else:
            lines.append(f"    if type({x}) not in plain and not settled({x}): return False")
    lines.append("    return True")
    namespace: dict[str, Any] = {"settled": _settled, "plain": _PLAIN}
    exec("\n".join(lines), namespace)  # source built from field names only
    check: Callable[[Any], bool] = namespace["check"]
    FROZEN_CHECKS[cls] = check
    return check


def _settled(value: Any) -> bool:
    """Whether ``value`` is already immutable all the way down."""
    kind = type(value)
    if kind in _ATOMS or kind is FrozenDict or kind is FrozenList:
        return True
    check = FROZEN_CHECKS.get(kind)
    if check is None:
        if not isinstance(value, msgspec.Struct):
            return False
        check = _checker(kind)
    return check(value)


_PLAIN: set[type] = {*_ATOMS, FrozenDict, FrozenList}
"""Types whose values never hold a mutable container: atoms, frozen containers, and the Struct
classes whose plan is empty (added as they are planned)."""


def _plan(cls: type) -> tuple[tuple[str, int], ...]:
    plan = _plan_fields(cls)
    if not plan:
        _PLAIN.add(cls)
    return plan


def _plan_fields(cls: type) -> tuple[tuple[str, int], ...]:
    try:
        info = mi.type_info(cls)
    except Exception:  # an annotation msgspec cannot resolve: check every field
        return tuple((name, _ANY) for name in getattr(cls, "__struct_fields__", ()))
    if not isinstance(info, mi.StructType):
        return ()
    plan: list[tuple[str, int]] = []
    for field in info.fields:
        if _is_atomic(field.type):
            continue
        if _is_tuple(field.type, atomic_items=True):
            plan.append((field.name, _SCALARS))
        elif _is_tuple(field.type, atomic_items=False):
            plan.append((field.name, _ITEMS))
            _plan_items(field.type)
        else:
            plan.append((field.name, _ANY))
    return tuple(plan)


def _plan_items(kind: mi.Type) -> None:
    """Plan the Struct classes a tuple field may hold, so frozen items are recognised at once."""
    if isinstance(kind, mi.UnionType):
        for member in kind.types:
            _plan_items(member)
    elif isinstance(kind, mi.VarTupleType):
        _plan_items(kind.item_type)
    elif isinstance(kind, mi.StructType) and kind.cls not in _PLANS:
        _PLANS[kind.cls] = ()  # recursion guard
        _PLANS[kind.cls] = _plan(kind.cls)


_ATOMIC_TYPES = (
    mi.StrType, mi.IntType, mi.FloatType, mi.BoolType, mi.NoneType, mi.DateTimeType,
    mi.LiteralType, mi.BytesType, mi.UUIDType, mi.DateType, mi.TimeType, mi.DecimalType,
    mi.EnumType,
)  # fmt: skip


def _is_atomic(kind: mi.Type, seen: frozenset[type] = frozenset()) -> bool:
    """A value of this type can hold no mutable container (plain values, all-atomic Structs)."""
    if isinstance(kind, _ATOMIC_TYPES):
        return True
    if isinstance(kind, mi.UnionType):
        return all(_is_atomic(t, seen) for t in kind.types)
    if isinstance(kind, mi.StructType) and kind.cls not in seen:
        inner = seen | {kind.cls}
        return all(_is_atomic(f.type, inner) for f in kind.fields)
    return False


def _is_tuple(kind: mi.Type, *, atomic_items: bool) -> bool:
    """A tuple (or None); with ``atomic_items``, of items that hold no container."""
    if isinstance(kind, mi.UnionType):
        others = [t for t in kind.types if not isinstance(t, mi.NoneType)]
        return len(others) == 1 and _is_tuple(others[0], atomic_items=atomic_items)
    if not isinstance(kind, mi.VarTupleType):
        return False
    return _is_atomic(kind.item_type) if atomic_items else True
