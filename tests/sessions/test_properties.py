"""Property tests: random valid sessions fold the same everywhere; random invalid events change
nothing.

:class:`Agent` draws random *valid* event sequences the way an agent loop and a compactor would
write them: turns, steps, assistant messages with tool calls, dispatches and results, user, context
and steering messages, and random replacements of surface spans (including spans whose start seq is
numerically greater than their end, once an earlier replacement sits at the head) and tool-result
content rewrites.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compaction.errors import EventRuleError
from compaction.sessions.blocks import Message, Source, TextBlock, ToolCallBlock, ToolResultBlock
from compaction.sessions.events import (
    APPEND,
    UNSET_SEQ,
    UNSET_TIME,
    AssistantChunk,
    AssistantMessage,
    ContextMessage,
    Replace,
    RequestHeader,
    SessionEvent,
    SteeringMessage,
    StepEnd,
    StepStart,
    ToolCall,
    ToolResult,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    UserMessage,
)
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from tests.builders import MODEL, state_of

Action = tuple[str, Callable[[], SessionEvent]]

PROPERTY_SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def text_message(kind: str, number: int, role: Any = "user") -> Message:
    source = MODEL if role == "assistant" else Source(kind="user")
    return Message(id=f"{kind}-{number}", role=role, content=(TextBlock(f"{kind} {number}"),), source=source)


class Agent:
    """Draws one valid event at a time for ``session`` (tracking calls like an agent loop)."""

    def __init__(self, session: Session, data: st.DataObject) -> None:
        self.session = session
        self.data = data
        self.requested: list[str] = []  # tool-call blocks of this step not yet dispatched
        self.dispatched: list[str] = []  # dispatched calls of this step not yet answered
        self.counter = 0

    # ------------------------------------------------------------ choosing

    def step(self) -> SessionEvent:
        flow, other = self.actions()
        main_path = self.data.draw(st.integers(0, 2), label="main path") > 0
        pool = flow if main_path or not other else other
        _, make = self.data.draw(st.sampled_from(pool), label="action")
        return self.session.append(make())

    def actions(self) -> tuple[list[Action], list[Action]]:
        """The loop's next moves (``flow``) and everything else that is valid now (``other``)."""
        s = self.session
        other: list[Action] = [("user", self.user), ("context", self.context)]
        if s.nodes:
            other += [("replace", self.replace_span), ("replace-context", self.replace_context)]
        if s.open_turn is None:
            return [("turn/start", self.turn_start)], other
        other.append(("request/header", self.header))
        if self.result_nodes():
            other += [("rewrite", self.rewrite_result)] * 3
        if s.open_step is None:
            return [("step/start", self.step_start), ("turn/end", self.turn_end)], other
        other.append(("steering", self.steering))
        if s.nodes:
            other.append(("replace-assistant", self.replace_with_assistant))
        flow: list[Action] = [("assistant", self.assistant), ("chunk", self.chunk)]
        if self.requested:
            flow += [("tool/call", self.tool_call)] * 3
        if self.dispatched:
            flow += [("tool/result", self.tool_result)] * 3
        if not (self.requested or self.dispatched):
            flow.append(("step/end", self.step_end))
        else:
            other.append(("step/end", self.step_end))  # a step abandoned with calls open
        return flow, other

    def number(self) -> int:
        self.counter += 1
        return self.counter

    def result_nodes(self) -> list[int]:
        return [n for n in self.session.nodes if isinstance(self.session.event(n), ToolResult)]

    # ------------------------------------------------------------ turns and steps

    def turn_start(self) -> SessionEvent:
        return TurnStart(turn=self.session.structure.next_turn)

    def turn_end(self) -> SessionEvent:
        turn = self.session.open_turn
        assert turn is not None
        return TurnEnd(turn=turn, reason=TurnEndReason("completed"))

    def step_start(self) -> SessionEvent:
        turn = self.session.open_turn
        assert turn is not None
        self.requested, self.dispatched = [], []
        return StepStart(turn=turn, step=self.session.structure.next_step)

    def step_end(self) -> SessionEvent:
        turn, step = self.turn_step()
        return StepEnd(turn=turn, step=step)

    def turn_step(self) -> tuple[int, int]:
        turn, step = self.session.open_turn, self.session.open_step
        assert turn is not None and step is not None
        return turn, step

    def header(self) -> SessionEvent:
        return RequestHeader(provider="p", model=f"m{self.number()}")

    # ------------------------------------------------------------ messages

    def user(self) -> SessionEvent:
        return UserMessage(message=text_message("user", self.number()), surface_op=APPEND)

    def context(self) -> SessionEvent:
        return ContextMessage(message=text_message("context", self.number()), surface_op=APPEND)

    def steering(self) -> SessionEvent:
        return SteeringMessage(message=text_message("steer", self.number()), surface_op=APPEND)

    def chunk(self) -> SessionEvent:
        turn, step = self.turn_step()
        return AssistantChunk(turn=turn, step=step, chunk="…")

    def assistant(self) -> SessionEvent:
        turn, step = self.turn_step()
        n_calls = self.data.draw(st.integers(0, 2), label="calls")
        number = self.number()
        calls = tuple(ToolCallBlock(f"call-{number}-{k}", "bash", "{}") for k in range(n_calls))
        texts = () if self.data.draw(st.booleans(), label="empty") and not calls else (TextBlock("ok"),)
        message = Message(id=f"assistant-{number}", role="assistant", content=(*texts, *calls), source=MODEL)
        self.requested += [c.id for c in calls]
        chunks = [s for s in range(len(self.session)) if isinstance(self.session.event(s), AssistantChunk)]
        cited = (
            tuple(self.data.draw(st.lists(st.sampled_from(chunks), unique=True), label="chunks"))
            if chunks
            else ()
        )
        sources = cited if self.data.draw(st.booleans(), label="cite") else None
        return AssistantMessage(
            message=message, surface_op=APPEND, source_event_seqs=sources, turn=turn, step=step
        )

    def tool_call(self) -> SessionEvent:
        call_id = self.data.draw(st.sampled_from(self.requested), label="dispatch")
        self.requested.remove(call_id)
        self.dispatched.append(call_id)
        turn, step = self.turn_step()
        return ToolCall(turn=turn, step=step, call_id=call_id, name="bash", arguments="{}")

    def tool_result(self) -> SessionEvent:
        turn, step = self.turn_step()
        call_id = self.data.draw(st.sampled_from(self.dispatched), label="answer")
        self.dispatched.remove(call_id)
        call_seq = max(
            s
            for s in range(len(self.session))
            if isinstance(e := self.session.event(s), ToolCall) and e.call_id == call_id
        )
        block = ToolResultBlock(call_id, (TextBlock(f"output of {call_id}"),))
        message = Message(
            id=f"result-{call_id}",
            role="user",
            content=(block,),
            source=Source(kind="tool", call_id=call_id),
        )
        return ToolResult(
            message=message, surface_op=APPEND, source_event_seqs=(call_seq,), turn=turn, step=step
        )

    # ------------------------------------------------------------ replacements

    def span(self) -> tuple[Replace, tuple[int, ...]]:
        """A random positional span of the current surface and a valid citation set for it."""
        nodes = self.session.nodes
        heads = [k for k in range(len(nodes) - 1) if nodes[k] > nodes[-1]]
        if bool(heads) and self.data.draw(st.booleans(), label="reversed seqs"):
            # a span from a replacement back at an earlier position: start > end numerically
            i = self.data.draw(st.sampled_from(heads), label="i")
            j = self.data.draw(
                st.sampled_from([k for k in range(i + 1, len(nodes)) if nodes[k] < nodes[i]]),
                label="j",
            )
        else:
            i = self.data.draw(st.integers(0, len(nodes) - 1), label="i")
            j = self.data.draw(st.integers(i, len(nodes) - 1), label="j")
        shadowed = nodes[i : j + 1]
        extra = self.data.draw(st.lists(st.integers(0, len(self.session) - 1), max_size=3), label="extra")
        sources = list(dict.fromkeys([*shadowed, *extra]))
        order = self.data.draw(st.permutations(sources), label="order")
        return Replace(nodes[i], nodes[j]), tuple(order)

    def replace_span(self) -> SessionEvent:
        op, sources = self.span()
        return UserMessage(
            message=text_message("summary", self.number()), surface_op=op, source_event_seqs=sources
        )

    def replace_context(self) -> SessionEvent:
        op, sources = self.span()
        return ContextMessage(
            message=text_message("ctx-summary", self.number()),
            surface_op=op,
            source_event_seqs=sources,
        )

    def replace_with_assistant(self) -> SessionEvent:
        turn, step = self.turn_step()
        op, sources = self.span()
        message = text_message("assistant-summary", self.number(), role="assistant")
        return AssistantMessage(
            message=message, surface_op=op, source_event_seqs=sources, turn=turn, step=step
        )

    def rewrite_result(self) -> SessionEvent:
        target = self.data.draw(st.sampled_from(self.result_nodes()), label="rewrite")
        return content_rewrite(self.session, target, f"rewritten {self.number()}")


def content_rewrite(session: Session, target: int, text: str, **message_changes: Any) -> ToolResult:
    original = session.event(target)
    assert isinstance(original, ToolResult)
    block = original.message.content[0]
    assert isinstance(block, ToolResultBlock)
    content = (msgspec.structs.replace(block, content=(TextBlock(text),)),)
    message = msgspec.structs.replace(original.message, content=content, **message_changes)
    return msgspec.structs.replace(
        original,
        seq=UNSET_SEQ,
        time=UNSET_TIME,
        message=message,
        surface_op=Replace(target, target),
        source_event_seqs=(target,),
    )


@st.composite
def valid_sessions(draw: st.DrawFn, max_events: int = 50) -> Session:
    session = Session()
    agent = Agent(session, draw(st.data()))
    for _ in range(draw(st.integers(1, max_events), label="length")):
        agent.step()
    return session


# ---------------------------------------------------------------- what must agree


@PROPERTY_SETTINGS
@given(session=valid_sessions(), data=st.data())
def test_live_fold_replay_reload_and_snapshot_agree(session: Session, data: st.DataObject) -> None:
    events = list(session.events())
    live = state_of(session)
    assert state_of(Session.replay(session.id, events)) == live
    interval = data.draw(st.integers(2, 9), label="snapshot interval")
    cuts = sorted(data.draw(st.sets(st.integers(1, len(events)), max_size=6), label="saves") | {len(events)})
    with SessionStore.open("memory://", snapshot_interval=interval) as store:
        writer = store.create(session.id)
        start = 0
        for cut in cuts:
            writer.append_all(events[start:cut])
            store.save(writer)
            start = cut
        assert state_of(store.get(session.id)) == live
        assert state_of(store.get(session.id, use_snapshots=False)) == live
        at = data.draw(st.integers(0, len(events) - 1), label="at")
        then = store.get(session.id, at=at)
        assert then.nodes == session.surface_at(at)
        assert state_of(then) == state_of(Session.replay(session.id, events[: at + 1]))


@PROPERTY_SETTINGS
@given(session=valid_sessions(max_events=40))
def test_surface_at_k_is_a_fresh_session_fed_k_plus_one_events(session: Session) -> None:
    events = list(session.events())
    fresh = Session(session.id)
    for k, event in enumerate(events):
        fresh.append(event)
        assert session.surface_at(k) == fresh.nodes
        assert session.messages_at(k) == fresh.derive_messages()
    assert fresh.surface.generation == session.surface.generation


# ---------------------------------------------------------------- invalid events change nothing


def missing_seq(session: Session, nodes: list[int], seq: int, data: st.DataObject) -> int:
    off_surface = [s for s in range(seq) if s not in nodes] + [seq, seq + 7]
    return data.draw(st.sampled_from(off_surface), label="missing")


def summary(op: Any, sources: Any) -> UserMessage:
    return UserMessage(message=text_message("bad", 0), surface_op=op, source_event_seqs=sources)


def bad_event(kind: str, session: Session, nodes: list[int], seq: int, data: st.DataObject) -> SessionEvent:
    """An event that must be rejected when it would get ``seq`` on a surface of ``nodes``."""
    if kind == "bad seq":
        wrong = data.draw(st.sampled_from([seq + 1, seq + 5, *([seq - 1] if seq else [])]), label="seq")
        return msgspec.structs.replace(summary(APPEND, None), seq=wrong)
    if kind == "surface op on a log-only type":
        return data.draw(
            st.sampled_from(
                [
                    TurnStart(turn=1, surface_op=APPEND),
                    StepEnd(turn=1, step=1, surface_op=Replace(0, 0)),
                    TurnStart(turn=1, source_event_seqs=(0,)),
                ]
            ),
            label="log-only",
        )
    if kind == "no surface op":
        return summary(None, None)
    if kind == "missing endpoint":
        gone = missing_seq(session, nodes, seq, data)
        other = data.draw(st.sampled_from(nodes), label="other") if nodes else gone
        op = data.draw(st.sampled_from([Replace(gone, other), Replace(other, gone)]), label="op")
        return summary(op, tuple(range(seq)) or None)
    if kind == "reversed":
        i = data.draw(st.integers(0, len(nodes) - 2), label="i")
        j = data.draw(st.integers(i + 1, len(nodes) - 1), label="j")
        return summary(Replace(nodes[j], nodes[i]), tuple(nodes[i : j + 1]))
    if kind == "missing sources":
        i = data.draw(st.integers(0, len(nodes) - 1), label="i")
        j = data.draw(st.integers(i, len(nodes) - 1), label="j")
        shadowed = nodes[i : j + 1]
        drop = data.draw(st.sampled_from(shadowed), label="drop")
        cited = tuple(s for s in shadowed if s != drop)
        return summary(Replace(nodes[i], nodes[j]), data.draw(st.sampled_from([cited or None, None])))
    if kind == "duplicate sources":
        x = data.draw(st.integers(0, seq - 1), label="x")
        return summary(APPEND, (x, x))
    if kind == "future sources":
        return summary(APPEND, (data.draw(st.integers(seq, seq + 3), label="future"),))
    if kind == "empty sources":
        return summary(APPEND, ())
    if kind == "negative sources":
        return summary(APPEND, (-1,))
    # a tool-result rewrite that changes the message id
    targets = [n for n in nodes if n < len(session) and isinstance(session.event(n), ToolResult)]
    target = data.draw(st.sampled_from(targets), label="target")
    return content_rewrite(session, target, "sneaky", id="another-id")


def applicable(session: Session, nodes: list[int], seq: int) -> list[str]:
    kinds = [
        "bad seq",
        "surface op on a log-only type",
        "no surface op",
        "missing endpoint",
        "future sources",
        "empty sources",
        "negative sources",
    ]
    if len(nodes) >= 2:
        kinds.append("reversed")
    if nodes:
        kinds.append("missing sources")
    if seq >= 1:
        kinds.append("duplicate sources")
    if any(isinstance(session.event(n), ToolResult) for n in nodes if n < len(session)):
        kinds.append("tool-result id change")
    return kinds


@PROPERTY_SETTINGS
@given(session=valid_sessions(max_events=40), data=st.data())
def test_an_invalid_event_is_rejected_and_changes_nothing(session: Session, data: st.DataObject) -> None:
    nodes, seq = list(session.nodes), len(session)
    kind = data.draw(st.sampled_from(applicable(session, nodes, seq)), label="kind")
    event = bad_event(kind, session, nodes, seq, data)
    before = state_of(session)
    try:
        session.append(event)
    except EventRuleError:
        pass
    else:
        raise AssertionError(f"{kind}: {event!r} was accepted")
    assert state_of(session) == before


@PROPERTY_SETTINGS
@given(session=valid_sessions(max_events=40), data=st.data())
def test_a_batch_with_one_invalid_event_appends_nothing(session: Session, data: st.DataObject) -> None:
    """The bad event comes after a valid user message that is already on the batch's surface."""
    filler_seq = len(session)
    nodes, seq = [*session.nodes, filler_seq], filler_seq + 1
    kind = data.draw(st.sampled_from(applicable(session, nodes, seq)), label="kind")
    event = bad_event(kind, session, nodes, seq, data)
    filler = UserMessage(message=text_message("filler", 0), surface_op=APPEND)
    before = state_of(session)
    try:
        session.append_all([filler, event])
    except EventRuleError:
        pass
    else:
        raise AssertionError(f"{kind}: {event!r} was accepted")
    assert state_of(session) == before
    session.append(filler)  # and the session still accepts valid events
    assert session.nodes[-1] == filler_seq
