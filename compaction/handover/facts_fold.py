"""The span's handover facts folded as the messages arrive, and carried by the session's snapshot.

:func:`~compaction.handover.facts.span_facts` walks a span's messages once, reading each
(:func:`~compaction.handover.reading.read`: its calls' keys, its results' outcomes, its text). A
process that loaded the session from its snapshot has read none of them, so its first compaction
used to read the whole span (about 40 us a message, most of it deciding from a tool's output
whether it failed). :class:`FactsFold` keeps, for the surface from the first compactable node on,
what that walk finds, each item with the surface position it was found at, so the facts of any
span from there to a cut are the items found before the cut:

- asks, slash commands, context notes, interruptions, the agent's texts and its stated intents:
  positions;
- tool calls (steps): the position and block index of each call and of its result, its tool, and
  whether the result failed or was the user's rejection;
- failures: the call's key, the first informative line, and the position of the first later
  success of the same call (a failure is fixed for the cuts after that position);
- the harness's feedback, with the step that followed it;
- todo/plan changes and file actions, with their steps; framework items (opaque blocks).

The few facts that quote a message (the last steps, the unanswered calls, the latest agent text)
are taken from the messages themselves when the span is answered: a handful of messages.

Exact, not an approximation: ``tests/compaction/test_facts_fold.py`` compares the fold's facts with
:func:`~compaction.handover.facts.span_facts` at every cut of every public transcript. The fold
halts (answers no cut after that position) where the walk would read something it cannot follow:
a checkpoint (ours or an imported harness's: merged apart), a result that answers no open call of
the fold. It answers no cut before the span's first tool call (a harness without tool calls reads
its user messages as observations, which only the walk does).

The read-ahead (:mod:`compaction.handover.readahead`) advances the fold with the identifier fold
(:mod:`compaction.handover.fold`) and publishes it as the session's reading :data:`READING`.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass

import msgspec

from compaction.handover.calls import call_key, describe, result_text
from compaction.handover.facts import LAST_STEPS, SpanFacts
from compaction.handover.failures import HARNESS_TOOL, ErrorFact
from compaction.handover.files import file_action, files_of
from compaction.handover.fold import SurfaceFold, folded_identifiers, published_fold
from compaction.handover.harness_text import (
    HARNESS_SOURCE,
    awaits_reply,
    clean_user_text,
    feedback_shaped,
    harness_note,
)
from compaction.handover.identifiers import Identifiers
from compaction.handover.intent import intent_of
from compaction.handover.outcomes import first_informative_line
from compaction.handover.reading import Call, Result, read
from compaction.handover.tasks import TodoOp, created_task_id, open_tasks, todo_op
from compaction.sessions.blocks import Message, ToolCallBlock, ToolResultBlock, text_of
from compaction.sessions.session import Session, project
from compaction.vocabulary.checkpoint import is_checkpoint

__all__ = ["READING", "FactsFold", "folded_facts"]

READING = "handover/facts@1"
"""The fold's name among the session's readings; a change of what the walk finds of a message or
of this encoding must bump it."""

POSITIONS = "q"
FAILED, REJECTED = 1, 2
"""Flags of an answered step."""
TOOL_BLOCKS = (ToolCallBlock, ToolResultBlock)


@dataclass(slots=True)
class _Failure:
    """A failed step: its call's key, the result's first informative line, and the position of
    the first later success of the same call (-1: none yet)."""

    key: str
    line: str
    fixed_at: int


class FactsState(msgspec.Struct, array_like=True):
    """The encoded fold (see :class:`FactsFold`); arrays are packed int64."""

    generation: int
    begin: int
    begin_seq: int
    stop: int
    last_seq: int
    halt_at: int
    first_call_at: int
    awaits_reply: bool
    char_at: bytes
    char_sum: bytes
    asks: list[tuple[int, str]]
    slash: list[tuple[int, str]]
    context: list[tuple[int, str]]
    interrupts: bytes
    agent_at: bytes
    intents: list[tuple[int, str]]
    names: list[str]
    steps: list[bytes]
    """call_pos, call_index, result_pos, result_index, tool, flags."""
    pending: list[tuple[str, int, str]]
    failures: list[tuple[int, str, str, int]]
    feedback: list[tuple[int, int, str]]
    todos: list[tuple[int, TodoOp, str | None]]
    files: list[tuple[int, int, str, tuple[str, ...]]]
    opaque: list[tuple[int, str, str]]


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(FactsState)


def _positions(data: bytes = b"") -> array[int]:
    found = array(POSITIONS)
    found.frombytes(data)
    return found


class FactsFold(SurfaceFold):
    """What the walk of :func:`~compaction.handover.facts.span_facts` finds of surface positions
    ``begin`` to ``stop``, each with its position (see the module)."""

    def __init__(self, generation: int, begin: int, begin_seq: int) -> None:
        super().__init__(generation, begin, begin_seq)
        self.first_call_at = -1
        self.awaits_reply = False
        """The message before ``stop`` is the agent's words awaiting a reply (no call in it)."""
        self.char_at, self.char_sum = _positions(), _positions()
        self.asks: list[tuple[int, str]] = []
        self.slash: list[tuple[int, str]] = []
        self.context: list[tuple[int, str]] = []
        self.interrupts = _positions()
        self.agent_at = _positions()
        self.intents: list[tuple[int, str]] = []
        self.names: dict[str, int] = {}
        self.call_pos, self.call_index = _positions(), _positions()
        self.result_pos, self.result_index = _positions(), _positions()
        self.tool, self.flags = _positions(), _positions()
        self.pending: dict[str, tuple[int, str]] = {}
        """The open calls by id: their step and key."""
        self.failures: dict[int, _Failure] = {}
        self.open_failures: dict[tuple[int, str], list[int]] = {}
        self.feedback: list[tuple[int, int, str]] = []
        self.todos: list[tuple[int, TodoOp, str | None]] = []
        self.files: list[tuple[int, int, str, tuple[str, ...]]] = []
        self.opaque: list[tuple[int, str, str]] = []

    # ------------------------------------------------------------ folding

    def _fold(self, session: Session, message: Message, position: int) -> None:
        found = read(message)
        if found.checkpoint or is_checkpoint(message):  # merged apart (its sections, its identifiers)
            self.halt_at = position
            return
        self.char_at.append(position)
        self.char_sum.append((self.char_sum[-1] if self.char_sum else 0) + found.chars)
        self.opaque.extend((position, kind, text) for kind, text in found.opaque)
        tools = [i for i, block in enumerate(message.content) if isinstance(block, TOOL_BLOCKS)]
        for index, item in zip(tools, found.items, strict=True):
            if type(item) is Call:
                self._call(item, position, index)
            elif not self._result(session, item, position, index):  # type: ignore[arg-type]
                self.halt_at = position
                return
        if found.role == "assistant":
            if found.text:
                self.agent_at.append(position)
                intent = intent_of(found.text)
                if intent is not None:
                    self.intents.append((position, intent))
        elif found.from_user:
            self._from_user(message, found.text, position)
        self.awaits_reply = awaits_reply(message)

    def _call(self, item: Call, position: int, index: int) -> None:
        step = len(self.call_pos)
        if self.first_call_at < 0:
            self.first_call_at = position
        self.call_pos.append(position)
        self.call_index.append(index)
        self.result_pos.append(-1)
        self.result_index.append(-1)
        self.tool.append(self.names.setdefault(item.block.name, len(self.names)))
        self.flags.append(0)
        self.pending[item.block.id] = (step, item.key)
        op = todo_op(item.block, item.todo, None)
        if op is not None:
            self.todos.append((step, op, None))

    def _result(self, session: Session, item: Result, position: int, index: int) -> bool:
        """Fold a result; False when it answers no open call (the fold halts)."""
        opened = self.pending.pop(item.block.tool_call_id, None)
        if opened is None:
            return False
        step, key = opened
        self.result_pos[step], self.result_index[step] = position, index
        self.flags[step] = (FAILED if item.failed else 0) | (REJECTED if item.rejected else 0)
        call = self._call_block(session, step)
        tool = self.tool[step]
        if item.failed:
            self._failure(session, step, tool, key, first_informative_line(result_text(item.block)))
        else:
            if not item.rejected:
                self._success(step, tool, key, position)
            kind, paths = file_action(call, item.block)
            if kind:
                self.files.append((step, position, kind, paths))
        if self.todos and call.name == "TaskCreate":
            self._created(step, item.block)
        if item.rejected:
            self.interrupts.append(position)
            if item.said is not None:
                self._user(item.said, position)
        return True

    def _failure(self, session: Session, step: int, tool: int, key: str, line: str) -> None:
        """A failed result: fixed at once when a later call of the same tool and key already
        succeeded (answered before this one), else when one does."""
        fixed_at = -1
        for later in range(step + 1, len(self.call_pos)):
            at = self.result_pos[later]
            if at < 0 or self.flags[later] or self.tool[later] != tool:
                continue
            if call_key(self._call_block(session, later)) == key and (fixed_at < 0 or at < fixed_at):
                fixed_at = at
        self.failures[step] = _Failure(key, line, fixed_at)
        if fixed_at < 0:
            self.open_failures.setdefault((tool, key), []).append(step)

    def _success(self, step: int, tool: int, key: str, position: int) -> None:
        waiting = self.open_failures.get((tool, key))
        if not waiting:
            return
        for failed in [s for s in waiting if s < step]:
            self.failures[failed].fixed_at = position
            waiting.remove(failed)
        if not waiting:
            del self.open_failures[(tool, key)]

    def _created(self, step: int, result: ToolResultBlock) -> None:
        for at in range(len(self.todos) - 1, -1, -1):
            if self.todos[at][0] == step:
                todo_step, op, _ = self.todos[at]
                self.todos[at] = (todo_step, op, created_task_id(result))
                return

    def _from_user(self, message: Message, text: str, position: int) -> None:
        if message.source.kind == HARNESS_SOURCE:
            note = harness_note(text)
            if note is not None:
                self.context.append((position, note))
        elif not self.awaits_reply and feedback_shaped(text):
            self.feedback.append((position, len(self.call_pos), first_informative_line(text)))
        else:
            self._user(text, position)

    def _user(self, text: str, position: int) -> None:
        cleaned = clean_user_text(text)
        self.context.extend((position, note) for note in cleaned.context)
        self.slash.extend((position, command) for command in cleaned.slash_commands)
        if cleaned.interrupted:
            self.interrupts.append(position)
        if cleaned.ask:
            self.asks.append((position, cleaned.ask))

    def _call_block(self, session: Session, step: int) -> ToolCallBlock:
        block = _message_at(session, self.call_pos[step]).content[self.call_index[step]]
        assert isinstance(block, ToolCallBlock)
        return block

    # ------------------------------------------------------------ answering

    def facts(self, session: Session, stop: int, identifiers: Identifiers) -> SpanFacts | None:
        """The facts of positions ``begin`` to ``stop`` (at most :attr:`stop`, before any halt),
        with the span's ``identifiers``; None when the span has no tool call (see the module)."""
        if not 0 <= self.first_call_at < stop:
            return None
        steps = bisect_left(self.call_pos, stop)
        answered = self._answered(stop, steps)
        asks = [(at, ask) for at, ask in self.asks if at < stop]
        last_ask_at = asks[-1][0] if asks else -1
        agent = bisect_left(self.agent_at, stop)
        last_agent_at = self.agent_at[agent - 1] if agent else -1
        unanswered = tuple(self._named(session, s) for s in range(steps) if not answered[s])
        tasks, active, seen = open_tasks(self._todo_ops(steps, answered))
        edited, created, opened = files_of(
            (kind, paths) for _, _, kind, paths in sorted(f for f in self.files if f[1] < stop)
        )
        return SpanFacts(
            chars=self.char_sum[bisect_left(self.char_at, stop) - 1],
            tools_used=self._tools_used(steps),
            user_asks=tuple(ask for _, ask in asks),
            errors=tuple(self._errors(stop, steps, answered)),
            open_tasks=tuple(tasks),
            intent=next((i for at, i in reversed(self.intents) if last_ask_at <= at < stop), None),
            files_edited=tuple(edited),
            files_created=tuple(created),
            files_read=tuple(opened),
            identifiers=identifiers,
            slash_commands=tuple(dict.fromkeys(c for at, c in self.slash if at < stop)),
            context=tuple(dict.fromkeys(c for at, c in self.context if at < stop)),
            opaque_items=tuple((kind, text) for at, kind, text in self.opaque if at < stop),
            interruptions=bisect_left(self.interrupts, stop),
            active_task=active,
            todo_seen=seen,
            last_steps=tuple(
                self._described(session, s, answered) for s in range(max(0, steps - LAST_STEPS), steps)
            ),
            last_agent_text=text_of(_message_at(session, last_agent_at).content).strip() if agent else None,
            unanswered=unanswered,
            prior_checkpoint=False,
            ends_with_ask=last_ask_at >= 0 and last_agent_at < last_ask_at and not unanswered,
        )

    def _answered(self, stop: int, steps: int) -> list[bool]:
        return [0 <= at < stop for at in self.result_pos[:steps]]

    def _tools_used(self, steps: int) -> tuple[tuple[str, int], ...]:
        counts = Counter(self.tool[:steps])
        names = list(self.names)
        return tuple((names[tool], counts[tool]) for tool in sorted(counts))

    def _errors(self, stop: int, steps: int, answered: list[bool]) -> list[ErrorFact]:
        found: list[tuple[float, ErrorFact]] = []
        names = list(self.names)
        for step, failure in self.failures.items():
            if step < steps and answered[step]:
                fixed = 0 <= failure.fixed_at < stop
                found.append((step, ErrorFact(names[self.tool[step]], failure.key, failure.line, fixed)))
        for at, step, line in self.feedback:
            if at < stop:
                fixed = step < steps and answered[step] and not self.flags[step] & FAILED
                found.append((step - 0.5, ErrorFact(HARNESS_TOOL, "", line, fixed)))
        return [error for _, error in sorted(found, key=lambda pair: pair[0])]

    def _todo_ops(self, steps: int, answered: list[bool]) -> list[TodoOp]:
        ops = []
        for step, op, created in self.todos:
            if step >= steps:
                break
            if answered[step] and self.flags[step] & FAILED:
                continue
            given = created if answered[step] else None
            ops.append(op if op.kind != "create" else msgspec.structs.replace(op, task_id=given))
        return ops

    def _named(self, session: Session, step: int) -> str:
        call = self._call_block(session, step)
        return f"{call.name} `{call_key(call)}`"

    def _described(self, session: Session, step: int, answered: list[bool]) -> str:
        result: ToolResultBlock | None = None
        if answered[step]:
            block = _message_at(session, self.result_pos[step]).content[self.result_index[step]]
            assert isinstance(block, ToolResultBlock)
            result = block
        failed = result is not None and bool(self.flags[step] & FAILED)
        return describe(self._call_block(session, step), result, failed)

    # ------------------------------------------------------------ encoding

    def encode(self) -> bytes:
        state = FactsState(
            self.generation,
            self.begin,
            self.begin_seq,
            self.stop,
            self.last_seq,
            self.halt_at,
            self.first_call_at,
            self.awaits_reply,
            self.char_at.tobytes(),
            self.char_sum.tobytes(),
            self.asks,
            self.slash,
            self.context,
            self.interrupts.tobytes(),
            self.agent_at.tobytes(),
            self.intents,
            list(self.names),
            [a.tobytes() for a in self._step_arrays()],
            [(id_, step, key) for id_, (step, key) in self.pending.items()],
            [(step, f.key, f.line, f.fixed_at) for step, f in self.failures.items()],
            self.feedback,
            self.todos,
            self.files,
            self.opaque,
        )
        return _ENCODER.encode(state)

    def _step_arrays(self) -> tuple[array[int], ...]:
        return (self.call_pos, self.call_index, self.result_pos, self.result_index, self.tool, self.flags)

    @classmethod
    def decode(cls, data: bytes) -> FactsFold | None:
        """The fold ``data`` encodes, or None when it does not decode (another layout)."""
        try:
            state = _DECODER.decode(data)
        except msgspec.DecodeError:
            return None
        if len(state.steps) != 6:
            return None
        fold = cls(state.generation, state.begin, state.begin_seq)
        fold.stop, fold.last_seq, fold.halt_at = state.stop, state.last_seq, state.halt_at
        fold.first_call_at, fold.awaits_reply = state.first_call_at, state.awaits_reply
        fold.char_at, fold.char_sum = _positions(state.char_at), _positions(state.char_sum)
        fold.asks, fold.slash, fold.context = state.asks, state.slash, state.context
        fold.interrupts, fold.agent_at = _positions(state.interrupts), _positions(state.agent_at)
        fold.intents = state.intents
        fold.names = {name: i for i, name in enumerate(state.names)}
        (fold.call_pos, fold.call_index, fold.result_pos, fold.result_index, fold.tool, fold.flags) = (
            _positions(data) for data in state.steps
        )
        fold.pending = {id_: (step, key) for id_, step, key in state.pending}
        for step, key, line, fixed_at in state.failures:
            fold.failures[step] = _Failure(key, line, fixed_at)
            if fixed_at < 0:
                fold.open_failures.setdefault((fold.tool[step], key), []).append(step)
        fold.feedback, fold.todos, fold.files = state.feedback, state.todos, state.files
        fold.opaque = state.opaque
        return fold


def _message_at(session: Session, position: int) -> Message:
    message = project(session.event(session.nodes[position]))
    assert message is not None
    return message


def folded_facts(session: Session, shadowed: tuple[int, ...]) -> SpanFacts | None:
    """:func:`~compaction.handover.facts.span_facts` of the messages of ``shadowed`` (surface
    seqs, in order), from the session's published folds (advanced over the nodes they have not
    read); None when there is no usable fold for this span. The fold halts at a checkpoint, so
    a span it answers holds none (ours or an imported one): its facts are all a summary of it
    needs."""
    fold = published_fold(session, READING, FactsFold)
    if fold is None:
        return None
    identifiers = folded_identifiers(session, shadowed)
    if identifiers is None:
        return None
    stop = fold.span_stop(session, shadowed)
    return None if stop is None else fold.facts(session, stop, identifiers)
