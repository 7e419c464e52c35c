"""The log's contract on every path into a session: logged events are deeply
immutable, and a message of the wrong shape is refused by append, replay, load and native import."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from compaction.errors import EventRuleError, MessageShapeError, TranscriptError
from compaction.sessions.blocks import Message, Source, TextBlock, ToolCallBlock, ToolResultBlock
from compaction.sessions.copy import copy_session
from compaction.sessions.events import (
    AssistantMessage,
    SessionEvent,
    StepStart,
    ToolCall,
    ToolResult,
    TurnStart,
    UserMessage,
)
from compaction.sessions.mapper import encode_event
from compaction.sessions.native import StoredExport, export_session, import_session
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from tests.builders import MODEL, user_event

# ---------------------------------------------------------------- 14.1 deep immutability


def test_the_issue_repro_cannot_corrupt_the_log(store_url: str) -> None:
    with SessionStore.open(store_url) as store:
        session = store.create(strict_structure=False)
        session.append(user_event("fix the bug"))
        sources = [0]
        reply = Message(id="a1", role="assistant", content=(TextBlock("on it"),), source=MODEL)
        session.append(
            AssistantMessage(
                turn=1,
                step=1,
                message=reply,
                surface_op="append",
                source_event_seqs=sources,  # type: ignore[arg-type]
            )
        )
        sources.append(7)
        store.save(session)
        loaded = store.get(session.id, strict_structure=False)
        assert loaded.event(1).source_event_seqs == (0,)
        assert session.event(1).source_event_seqs == (0,)


def _tool_session(meta: dict[str, Any], content: list[Any]) -> Session:
    session = Session()
    session.append(user_event("go"))
    session.append(TurnStart(turn=1))
    session.append(StepStart(turn=1, step=1))
    call = ToolCallBlock("c1", "bash", "{}")
    session.append(
        AssistantMessage(
            turn=1,
            step=1,
            message=Message(id="a1", role="assistant", content=(call,), source=MODEL),
            surface_op="append",
        )
    )
    session.append(ToolCall(turn=1, step=1, call_id="c1", name="bash", arguments="{}"))
    block = ToolResultBlock("c1", content)  # type: ignore[arg-type]
    message = Message(
        id="r1",
        role="user",
        content=[block],
        source=Source(kind="tool", call_id="c1"),  # type: ignore[arg-type]
    )
    session.append(
        ToolResult(turn=1, step=1, message=message, meta=meta, surface_op="append", source_event_seqs=(4,))
    )
    return session


def test_the_callers_containers_never_reach_the_log() -> None:
    meta: dict[str, Any] = {"exit": 0, "files": ["a.py"], "nested": {"k": [1]}}
    content: list[Any] = [TextBlock("ok")]
    session = _tool_session(meta, content)
    before = encode_event(session.event(5))
    meta["exit"] = 1
    meta["files"].append("b.py")
    meta["nested"]["k"].append(2)
    content.append(TextBlock("injected"))
    logged = session.event(5)
    assert encode_event(logged) == before
    assert isinstance(logged, ToolResult)
    assert type(logged.message.content) is tuple
    block = logged.message.content[0]
    assert isinstance(block, ToolResultBlock) and type(block.content) is tuple


def test_logged_containers_refuse_changes_but_compare_copy_and_pickle_as_plain_data() -> None:
    session = _tool_session({"files": ["a.py"], "nested": {"k": [1]}}, [TextBlock("ok")])
    logged = session.event(5)
    assert isinstance(logged, ToolResult) and logged.meta is not None
    meta: dict[str, Any] = logged.meta
    mutations: list[Callable[[], object]] = [
        lambda: meta.__setitem__("x", 1),
        lambda: meta.update(x=1),
        lambda: meta.pop("files"),
        lambda: meta["files"].append("b.py"),
        lambda: meta["nested"]["k"].extend([2]),
        lambda: meta["nested"].pop("k"),
    ]
    for mutate in mutations:
        with pytest.raises(TypeError, match="read-only"):
            mutate()
    assert logged.meta == {"files": ["a.py"], "nested": {"k": [1]}}
    assert copy.deepcopy(logged) == logged
    assert pickle.loads(pickle.dumps(logged)) == logged
    assert msgspec.json.decode(encode_event(logged))["meta"] == {"files": ["a.py"], "nested": {"k": [1]}}


def test_events_loaded_from_a_store_are_immutable_too(store_url: str) -> None:
    with SessionStore.open(store_url) as store:
        session = _tool_session({"files": ["a.py"]}, [TextBlock("ok")])
        saved = store.create()
        saved.append_all(session.events())
        store.save(saved)
        for use_snapshots in (True, False):
            loaded = store.get(saved.id, use_snapshots=use_snapshots).event(5)
            assert isinstance(loaded, ToolResult) and loaded.meta is not None
            with pytest.raises(TypeError, match="read-only"):
                loaded.meta["files"].append("b.py")


# ---------------------------------------------------------------- 14.2 message shape


USER = Source(kind="user")
TOOL = Source(kind="tool", call_id="c1")
RESULT_BLOCK = ToolResultBlock("c1", (TextBlock("ok"),))


def _user(role: str = "user", source: Source = USER) -> Message:
    return Message(id="u1", role=role, content=(TextBlock("hello"),), source=source)  # type: ignore[arg-type]


def _result(
    content: tuple[Any, ...] = (RESULT_BLOCK,),
    source: Source = TOOL,
) -> Message:
    return Message(id="r1", role="user", content=content, source=source)


def _prefix() -> list[SessionEvent]:
    """A valid start: a prompt, an open step with one call dispatched (seqs 0..4)."""
    call = ToolCallBlock("c1", "bash", "{}")
    return [
        UserMessage(message=_user(), surface_op="append"),
        TurnStart(turn=1),
        StepStart(turn=1, step=1),
        AssistantMessage(
            turn=1,
            step=1,
            message=Message(id="a1", role="assistant", content=(call,), source=MODEL),
            surface_op="append",
        ),
        ToolCall(turn=1, step=1, call_id="c1", name="bash", arguments="{}"),
    ]


def _tool_result(message: Message) -> ToolResult:
    return ToolResult(turn=1, step=1, message=message, surface_op="append", source_event_seqs=(4,))


BAD_SHAPES: dict[str, tuple[SessionEvent, str]] = {
    "user message with an assistant role": (
        UserMessage(message=_user(role="assistant", source=MODEL), surface_op="append"),
        'message must have role "user"',
    ),
    "assistant message with a user source": (
        AssistantMessage(
            turn=1,
            step=1,
            message=Message(id="a2", role="assistant", content=(TextBlock("hi"),)),
            surface_op="append",
        ),
        "message must have model source",
    ),
    "tool result with a user source": (
        _tool_result(_result(source=Source(kind="user"))),
        "message must have tool source",
    ),
    "tool result without a tool-result block": (
        _tool_result(_result(content=(TextBlock("ok"),))),
        "message must contain one tool-result block",
    ),
    "tool result whose block answers another call": (
        _tool_result(_result(content=(ToolResultBlock("c2", (TextBlock("ok"),)),))),
        "message has mismatched tool call ids",
    ),
}


def _stamped(events: list[SessionEvent]) -> list[SessionEvent]:
    return [msgspec.structs.replace(e, seq=i) for i, e in enumerate(events)]


def _expect(error: pytest.ExceptionInfo[BaseException], seq: int, text: str) -> None:
    assert isinstance(error.value, MessageShapeError)
    assert error.value.rule == "message-shape" and error.value.seq == seq
    assert f"session event at seq {seq} {text}" in str(error.value)


@pytest.mark.parametrize("case", sorted(BAD_SHAPES))
def test_append_and_replay_refuse_a_message_of_the_wrong_shape(case: str) -> None:
    bad, text = BAD_SHAPES[case]
    session = Session()
    session.append_all(_prefix())
    with pytest.raises(EventRuleError) as error:
        session.append(bad)
    _expect(error, 5, text)
    assert len(session) == 5
    with pytest.raises(EventRuleError) as error:
        Session.replay(session.id, _stamped([*_prefix(), bad]))
    _expect(error, 5, text)


def _write_unchecked(store: SessionStore, events: list[SessionEvent]) -> Session:
    """Store events without the shape check, as an older library version could have written them."""
    session = store.create()
    for event in _stamped(events):
        stamped = msgspec.structs.replace(event, time=session.clock())
        session._commit(stamped, session.surface.plan(stamped, session.event))
    store.save(session)
    return session


@pytest.mark.parametrize("case", sorted(BAD_SHAPES))
def test_a_stored_message_of_the_wrong_shape_is_refused_on_load(store_url: str, case: str) -> None:
    bad, text = BAD_SHAPES[case]
    with SessionStore.open(store_url) as store:
        written = _write_unchecked(store, [*_prefix(), bad])
        for use_snapshots in (True, False):
            with pytest.raises(EventRuleError) as error:
                store.get(written.id, use_snapshots=use_snapshots, strict_structure=False)
            _expect(error, 5, text)


def test_a_fold_a_copy_and_an_export_of_a_session_that_breaks_a_rule_refuse_it(store_url: str) -> None:
    """The fold re-checks every rule: a copy fails before anything of the session is written, and
    an export (from seq 0: no snapshot is taken of an unchecked save) writes nothing."""
    bad, text = BAD_SHAPES["tool result with a user source"]
    with SessionStore.open(store_url) as store, SessionStore.open("memory://") as target:
        written = _write_unchecked(store, [*_prefix(), bad])
        with pytest.raises(EventRuleError) as error:
            store.fold(written.id, use_snapshots=False)
        _expect(error, 5, text)
        with pytest.raises(EventRuleError):
            copy_session(store, target, written.id)
        assert not target.exists(written.id)
        with pytest.raises(EventRuleError):
            StoredExport.of(store, written.id)


@pytest.mark.parametrize("case", sorted(BAD_SHAPES))
def test_a_native_export_with_a_message_of_the_wrong_shape_is_refused(tmp_path: Path, case: str) -> None:
    bad, text = BAD_SHAPES[case]
    good = Session()
    good.append_all(_prefix())
    unchecked = Session(good.id)
    for event in [*good.events(), msgspec.structs.replace(bad, seq=5, time=good.event(4).time)]:
        unchecked._commit(event, unchecked.surface.plan(event, unchecked.event))
    path = tmp_path / "export.jsonl"
    export_session(unchecked, path)
    with pytest.raises(TranscriptError) as error:
        import_session(path)
    assert str(error.value).startswith(f"{path}:7: event seq 5 breaks a rule")
    assert f"session event at seq 5 {text}" in str(error.value)


def test_the_checkpoint_and_context_shapes_stay_legal() -> None:
    session = Session()
    plugin = Source(kind="plugin", plugin="compact", compaction_id="c-1")
    session.append(UserMessage(message=_user(source=plugin), surface_op="append"))
    assert len(session) == 1
