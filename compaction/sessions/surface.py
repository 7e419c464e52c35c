"""The surface: the ordered list of seqs the model sees, folded positionally from the log.

Validation runs these rules, in order (docs/sessions.md): contiguity, marker eligibility, replace
range, provenance (``source_event_seqs``), and the single tool-result rewrite rule.
:meth:`Surface.plan` validates without mutating; :meth:`Surface.apply` commits a plan. Appending
costs O(1); a replacement costs O(surface) once (a splice and a position-index rebuild).

Tool-pairing balance (+calls of an assistant message, -1 per tool result) is folded lazily over
surface order and cached per replace generation.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING, NamedTuple, NoReturn

import msgspec

from compaction.errors import CorruptSurfaceError, MessageShapeError, SurfaceRuleError
from compaction.sessions.blocks import (
    ImageBlock,
    Message,
    OpaqueBlock,
    ReasoningBlock,
    Source,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from compaction.sessions.events import (
    AssistantMessage,
    Replace,
    SessionEvent,
    ToolResult,
    tool_call_count,
)

EventLookup = Callable[[int], SessionEvent]

NODE_CODE = "q"  # the surface's seqs: int64, as snapshots pack them
SCAN_BUDGET = 2
"""Nodes scanned by position lookups, as a multiple of the surface, before the index is built."""
DELTA_CODE = "i"  # their tool-pairing deltas: int32


if TYPE_CHECKING:
    _IntArray = array[int]
else:  # array is subscriptable at run time only from Python 3.12
    _IntArray = array


class PackedInts(_IntArray):
    """A packed int array (the surface's seqs and deltas) that compares equal to a list or tuple
    of the same ints, as the lists it replaced did: ``session.nodes == [0, 2]`` keeps meaning what
    it reads as. A snapshot restores one with a single copy of its bytes."""

    __hash__ = None  # mutable, like list

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list | tuple):
            return len(self) == len(other) and self.tolist() == list(other)
        return array.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other


def packed(code: str, values: Iterable[int] | bytes = ()) -> PackedInts:
    """A :class:`PackedInts` of ``code`` holding ``values`` (or the native-order bytes given)."""
    result = PackedInts(code)
    if isinstance(values, bytes):
        result.frombytes(values)
    elif isinstance(values, array) and values.typecode == code:
        result.frombytes(values.tobytes())
    else:
        result.extend(values)
    return result


class Plan(NamedTuple):
    """A validated change to the surface: an append, a replacement, or nothing (log-only).

    A NamedTuple, not a frozen dataclass: one is built per appended event, and this is 3x cheaper.
    """

    seq: int
    delta: int  # tool-pairing delta of the new node
    start_index: int = -1  # replacement: first shadowed position (inclusive)
    end_index: int = -1  # replacement: last shadowed position (inclusive)
    shadowed: tuple[int, ...] = ()
    on_surface: bool = True

    @property
    def is_replace(self) -> bool:
        return self.start_index >= 0


@dataclass(frozen=True, slots=True)
class Mark:
    """A point to roll the surface back to. ``nodes``/``deltas`` are kept only when the changes
    since the mark may include a replacement (appends alone are undone by truncation)."""

    length: int
    count: int
    generation: int
    nodes: array[int] | None
    deltas: array[int] | None


class Surface:
    """Incremental surface fold. ``length`` counts every folded event, log-only ones included."""

    __slots__ = (
        "_cuts",
        "_cuts_generation",
        "_pos",
        "_scans",
        "deltas",
        "generation",
        "length",
        "nodes",
    )

    def __init__(self, length: int = 0) -> None:
        # Packed arrays, not lists: a snapshot's surface is restored by one copy of its bytes
        # (no int object per node), and iterating or indexing them costs what a list does.
        self.nodes: PackedInts = packed(NODE_CODE)
        self.deltas: PackedInts = packed(DELTA_CODE)
        self.generation = 0
        self.length = length
        self._pos: dict[int, int] | None = {}
        self._scans = 0
        self._cuts: list[int] = [0]
        self._cuts_generation = 0

    # ------------------------------------------------------------ state

    @classmethod
    def restore(cls, nodes: Sequence[int], deltas: Sequence[int], generation: int, length: int) -> Surface:
        return cls.adopt(packed(NODE_CODE, nodes), packed(DELTA_CODE, deltas), generation, length)

    @classmethod
    def adopt(cls, nodes: PackedInts, deltas: PackedInts, generation: int, length: int) -> Surface:
        """:meth:`restore` taking ownership of the arrays given (no copy: a snapshot's own)."""
        surface = cls(length)
        surface.nodes = nodes
        surface.deltas = deltas
        surface.generation = generation
        surface.drop_caches()
        return surface

    def copy(self) -> Surface:
        return Surface.restore(self.nodes, self.deltas, self.generation, self.length)

    def drop_caches(self) -> None:
        """Forget the position index and the running balance (an int object and more per node):
        both are rebuilt lazily when asked for. A restored surface starts so, a rollback returns
        so, and a fold over a long log drops them with each window it releases
        (:meth:`Session.release`)."""
        self._pos = None
        self._scans = 0
        self._cuts = [0]
        self._cuts_generation = self.generation

    def mark(self, *, replaces: bool) -> Mark:
        """Remember this state; O(1) unless ``replaces`` (then O(surface), like a replacement)."""
        nodes = array(NODE_CODE, self.nodes) if replaces else None
        deltas = array(DELTA_CODE, self.deltas) if replaces else None
        return Mark(self.length, len(self.nodes), self.generation, nodes, deltas)

    def rollback(self, mark: Mark) -> None:
        """Return to ``mark`` (a state this surface passed through); caches are rebuilt lazily."""
        if mark.nodes is not None and mark.deltas is not None:
            self.nodes[:] = mark.nodes
            self.deltas[:] = mark.deltas
        else:
            assert self.generation == mark.generation, "a replacement needs a mark with nodes"
            del self.nodes[mark.count :]
            del self.deltas[mark.count :]
        self.length = mark.length
        self.generation = mark.generation
        self.drop_caches()

    def position(self, seq: int) -> int | None:
        """The index of ``seq`` on the surface. After a restore or a replacement, lookups scan the
        packed array (C speed, no index to build: a pressure check asks for one or two, near the
        start) until they have scanned :data:`SCAN_BUDGET` times the surface; then the position
        index is built, once per generation (so the scans never cost more than building it)."""
        if self._pos is None:
            if self._scans < SCAN_BUDGET * len(self.nodes):
                try:
                    index = self.nodes.index(seq)
                except ValueError:
                    self._scans += len(self.nodes)
                    return None
                self._scans += index + 1
                return index
            self._pos = {s: i for i, s in enumerate(self.nodes)}
        return self._pos.get(seq)

    def balanced_at(self, index: int) -> bool:
        """Whether the cut before surface position ``index`` (``len(nodes)``: the end) splits no
        step: no tool call before it is waiting for a result after it."""
        return self.cuts()[index] == 0

    def __contains__(self, seq: object) -> bool:
        return isinstance(seq, int) and self.position(seq) is not None

    def __len__(self) -> int:
        return len(self.nodes)

    # ------------------------------------------------------------ validation

    def plan(self, event: SessionEvent, lookup: EventLookup) -> Plan:
        """Validate ``event`` against the current surface; raise SurfaceRuleError or plan it."""
        seq = event.seq
        if seq != self.length:
            raise SurfaceRuleError(
                "contiguity",
                seq,
                f"session event seq {seq} is not contiguous; expected {self.length}",
                expected=self.length,
                found=seq,
            )
        op = event.surface_op
        if not event.SURFACE:
            _check_log_only(event)
            return Plan(seq=seq, delta=0, on_surface=False)
        if op is None:
            raise SurfaceRuleError(
                "eligibility",
                seq,
                f'session event "{event.TYPE}" is surface-eligible and requires a surfaceOp marker',
                event_type=event.TYPE,
            )
        delta = tool_call_count(event)
        if not isinstance(op, Replace):
            if op != "append":
                raise SurfaceRuleError(
                    "eligibility",
                    seq,
                    f'session event "{event.TYPE}" carries an invalid surfaceOp: {op!r} at seq '
                    f'{seq}; expected "append" or Replace(start, end)',
                    surface_op=op,
                )
            _check_provenance(event, ())
            return Plan(seq=seq, delta=delta)
        i, j = self._replace_range(event, op)
        shadowed = tuple(self.nodes[i : j + 1])
        _check_provenance(event, shadowed)
        if isinstance(event, ToolResult):
            _check_tool_result_rewrite(event, shadowed, lookup)
        return Plan(seq=seq, delta=delta, start_index=i, end_index=j, shadowed=shadowed)

    def _replace_range(self, event: SessionEvent, op: Replace) -> tuple[int, int]:
        seq = event.seq
        if not (_is_seq(op.start) and _is_seq(op.end)):
            raise SurfaceRuleError(
                "eligibility",
                seq,
                f'session event "{event.TYPE}" carries an invalid replace surfaceOp: start '
                f"{op.start!r}, end {op.end!r} at seq {seq}; both must be non-negative integers",
                start=op.start,
                end=op.end,
            )
        i = self.position(op.start)
        if i is None:
            raise SurfaceRuleError(
                "replace-range",
                seq,
                f"surface replace: start seq {op.start} not found in surface (event seq {seq})",
                start=op.start,
            )
        j = self.position(op.end)
        if j is None:
            raise SurfaceRuleError(
                "replace-range",
                seq,
                f"surface replace: end seq {op.end} not found in surface (event seq {seq})",
                end=op.end,
            )
        if i > j:
            raise SurfaceRuleError(
                "replace-range",
                seq,
                f"surface replace: start seq {op.start} (index {i}) is after end seq {op.end} (index {j})",
                start=op.start,
                end=op.end,
                start_index=i,
                end_index=j,
            )
        return i, j

    # ------------------------------------------------------------ commit

    def apply(self, plan: Plan) -> None:
        self.length = plan.seq + 1
        if not plan.on_surface:
            return
        if not plan.is_replace:
            if self._pos is not None:
                self._pos[plan.seq] = len(self.nodes)
            self.nodes.append(plan.seq)
            self.deltas.append(plan.delta)
            return
        i, j = plan.start_index, plan.end_index
        self.nodes[i : j + 1] = array(NODE_CODE, (plan.seq,))
        self.deltas[i : j + 1] = array(DELTA_CODE, (plan.delta,))
        self.generation += 1
        self._pos = None
        self._scans = 0

    def fold(self, event: SessionEvent, lookup: EventLookup) -> Plan:
        plan = self.plan(event, lookup)
        self.apply(plan)
        return plan

    # ------------------------------------------------------------ tool-pairing balance

    def cuts(self) -> list[int]:
        """Running balance at each of the ``len(nodes) + 1`` cuts; raises on a corrupt surface.
        Extended over the nodes appended since the last call (one C-level running sum)."""
        if self._cuts_generation != self.generation or len(self._cuts) > len(self.nodes) + 1:
            self._cuts = [0]
            self._cuts_generation = self.generation
        done = len(self._cuts) - 1
        if done < len(self.nodes):
            tail = list(accumulate(self.deltas[done:], initial=self._cuts[-1]))
            if min(tail) < 0:
                k = done + next(i for i, value in enumerate(tail) if value < 0) - 1
                raise CorruptSurfaceError(
                    f"tool-pairing balance: tool/result at surface seq {self.nodes[k]} has no "
                    "matching tool-call (corrupt surface)",
                    self.nodes[k],
                )
            self._cuts.extend(tail[1:])
        return self._cuts

    def balanced_before(self, seq: int) -> bool:
        return self.cuts()[self._require(seq)] == 0

    def balanced_after(self, seq: int) -> bool:
        return self.cuts()[self._require(seq) + 1] == 0

    def is_balanced(self) -> bool:
        return self.cuts()[-1] == 0

    def _require(self, seq: int) -> int:
        index = self.position(seq)
        if index is None:
            raise CorruptSurfaceError(f"tool-pairing balance: surface seq {seq} not found", seq)
        return index


def _check_log_only(event: SessionEvent) -> None:
    if event.surface_op is not None:
        raise SurfaceRuleError(
            "eligibility",
            event.seq,
            f'session event "{event.TYPE}" is not surface-eligible and cannot carry surfaceOp',
            event_type=event.TYPE,
        )
    if event.source_event_seqs is not None:
        raise SurfaceRuleError(
            "eligibility",
            event.seq,
            f'session event "{event.TYPE}" is not surface-eligible and cannot carry sourceEventSeqs',
            event_type=event.TYPE,
        )


def _check_provenance(event: SessionEvent, shadowed: tuple[int, ...]) -> None:
    sources = event.source_event_seqs
    seq = event.seq
    if sources is None:
        if shadowed:
            _missing(seq, shadowed)
        return
    if not isinstance(sources, (tuple, list)):
        raise SurfaceRuleError(
            "provenance",
            seq,
            f"sourceEventSeqs on event at seq {seq} must be an array when present; found "
            f"{type(sources).__name__} {sources!r}",
            value=sources,
        )
    if not sources and event.TYPE != "assistant/message":
        raise SurfaceRuleError(
            "provenance",
            seq,
            f'sourceEventSeqs must not be empty except on assistant/message (seq {seq}, type "{event.TYPE}")',
        )
    if _plain_seqs(sources, seq):  # the common case, checked at C speed
        absent = set(shadowed).difference(sources) if shadowed else set()
        if absent:
            _missing(seq, tuple(s for s in shadowed if s in absent))
        return
    seen: set[int] = set()
    for value in sources:
        if not _is_seq(value):
            raise SurfaceRuleError(
                "provenance",
                seq,
                f'session event "{event.TYPE}" sourceEventSeqs must densely contain non-negative '
                f"safe integers; found {value!r} at seq {seq}",
                value=value,
            )
        if value in seen:
            raise SurfaceRuleError(
                "provenance",
                seq,
                f"sourceEventSeqs must not contain duplicates; {value} repeats at seq {seq}",
                value=value,
            )
        if value >= seq:
            raise SurfaceRuleError(
                "provenance",
                seq,
                f"sourceEventSeqs must reference earlier events: {value} >= current seq {seq}",
                value=value,
            )
        seen.add(value)
    missing = [s for s in shadowed if s not in seen]
    if missing:
        _missing(seq, tuple(missing))


def _plain_seqs(sources: tuple[int, ...] | list[int], seq: int) -> bool:
    """Whether ``sources`` are distinct plain ints in ``0..seq-1`` (what the rules below accept),
    decided without a Python step per value; False sends them through the rule by rule check."""
    return (
        set(map(type, sources)) == {int}
        and min(sources) >= 0
        and max(sources) < seq
        and len(set(sources)) == len(sources)
    )


def _is_seq(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _missing(seq: int, missing: tuple[int, ...]) -> None:
    raise SurfaceRuleError(
        "provenance",
        seq,
        "surface replace: sourceEventSeqs must include every shadowed surface node; missing "
        + ", ".join(map(str, missing))
        + f" (event seq {seq})",
        missing=list(missing),
    )


def _check_tool_result_rewrite(event: ToolResult, shadowed: tuple[int, ...], lookup: EventLookup) -> None:
    seq = event.seq
    if len(shadowed) != 1:
        raise SurfaceRuleError(
            "tool-result-rewrite",
            seq,
            "tool/result surface replacement must rewrite exactly one current node; it shadows "
            f"{len(shadowed)} (seqs {', '.join(map(str, shadowed))})",
            shadowed=list(shadowed),
        )
    original = lookup(shadowed[0])
    if not isinstance(original, ToolResult):
        raise SurfaceRuleError(
            "tool-result-rewrite",
            seq,
            f"tool/result surface replacement must target a current tool/result; seq "
            f"{shadowed[0]} is {original.TYPE}",
            target=shadowed[0],
        )
    if _blank_content(event) != _blank_content(original):
        raise SurfaceRuleError(
            "tool-result-rewrite",
            seq,
            f"tool/result surface replacement may change only content (replacing seq "
            f"{shadowed[0]} at seq {seq}: turn, step, error, meta, message id, role, source, "
            "tool call id and error flag must stay identical)",
            target=shadowed[0],
        )


def _blank_content(event: ToolResult) -> tuple[object, ...]:
    """The event's data with only ``message.content[0].content`` blanked (the tool-result rewrite
    rule compares the rest)."""
    message = event.message
    head: object = message.content[0] if message.content else None
    if isinstance(head, ToolResultBlock):
        head = msgspec.structs.replace(head, content=())
    return (
        event.turn,
        event.step,
        event.error,
        event.meta,
        event.synthesized,
        message.id,
        message.role,
        message.source,
        head,
        message.content[1:],
    )


# ---------------------------------------------------------------- message shape

_BLOCKS = frozenset({TextBlock, ReasoningBlock, ImageBlock, ToolCallBlock, ToolResultBlock, OpaqueBlock})


def check_message_shape(event: SessionEvent) -> None:
    """Reject a surface event whose message has the wrong shape for its type (the reference's
    seed/load rules, applied here on every path into a session). ``user/message``,
    ``context/message`` and ``steering/message`` carry a user-role message; ``assistant/message`` an
    assistant-role message with a model source naming provider and model; ``tool/result`` a
    user-role message with a tool source and exactly one tool-result block for the same call id.
    Errors use the reference's texts (subject ``session event at seq <s>``), then what was found."""
    if not event.SURFACE:
        return
    message = getattr(event, "message", None)
    if not isinstance(message, Message) or not isinstance(message.id, str) or not message.id:
        _shape(event, "lacks an identified message", "a message with a non-empty id", message)
    source = message.source
    if not isinstance(source, Source) or not isinstance(source.kind, str) or not source.kind:
        _shape(event, "message has invalid source", "a source with a kind", source)
    content = message.content
    if type(content) is not tuple:
        _shape(event, "message has invalid content", "a tuple of content blocks", content)
    for block in content:
        if type(block) not in _BLOCKS:
            _shape(event, "message has invalid content", "content blocks", block)
    if isinstance(event, AssistantMessage):
        _check_assistant(event, message)
    elif isinstance(event, ToolResult):
        _check_tool_result(event, message)
    elif message.role != "user":
        _shape(event, 'message must have role "user"', "user", message.role)


def _check_assistant(event: SessionEvent, message: Message) -> None:
    if message.role != "assistant":
        _shape(event, 'message must have role "assistant"', "assistant", message.role)
    source = message.source
    if source.kind != "model" or not source.provider or not source.model:
        found = f"{source.kind} source (provider {source.provider!r}, model {source.model!r})"
        _shape(event, "message must have model source", "model source with provider and model", found)


def _check_tool_result(event: SessionEvent, message: Message) -> None:
    if message.role != "user":
        _shape(event, 'message must have role "user"', "user", message.role)
    source = message.source
    if source.kind != "tool" or not source.call_id:
        found = f"{source.kind} source (call id {source.call_id!r})"
        _shape(event, "message must have tool source", "tool source with a call id", found)
    blocks = message.content
    if len(blocks) != 1 or not isinstance(blocks[0], ToolResultBlock):
        found = ", ".join(type(b).__name__ for b in blocks) or "no blocks"
        _shape(event, "message must contain one tool-result block", "one ToolResultBlock", found)
    block = blocks[0]
    assert isinstance(block, ToolResultBlock)
    if block.tool_call_id != source.call_id:
        found = f"block tool call id {block.tool_call_id!r}"
        _shape(event, "message has mismatched tool call ids", f"source call id {source.call_id!r}", found)


def _shape(event: SessionEvent, rule_text: str, expected: object, found: object) -> NoReturn:
    """``session event at seq <s> <rule_text>`` (the reference's text), then type and values."""
    text = f"session event at seq {event.seq} {rule_text} ({event.TYPE}: expected {expected}, found {found})"
    raise MessageShapeError(
        "message-shape", event.seq, text, event_type=event.TYPE, expected=expected, found=found
    )
