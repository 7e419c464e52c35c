"""Plain helpers shared by the tests (fixtures live in conftest.py).

Builders for hand-made sessions (real events, real folds, a deterministic clock); what to compare
sessions by (:func:`state_of`, :func:`log_types`); the ``compaction`` command line run in-process
(:func:`run_json`, :func:`run_human`); and other processes (:func:`run_python`, :func:`wait_until`).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from compaction.errors import CorruptSurfaceError
from compaction.sessions.blocks import Message, Source, TextBlock, ToolCallBlock, ToolResultBlock
from compaction.sessions.events import (
    APPEND,
    AssistantMessage,
    RequestHeader,
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
from tests.conftest import ROOT

MODEL = Source(kind="model", provider="test", model="test-model")

Doc = dict[str, Any]
"""A JSON document printed by the command line."""


def ticking_clock(start: datetime = datetime(2025, 1, 1, tzinfo=UTC)) -> Callable[[], datetime]:
    """A deterministic clock for ``Session(clock=...)``: ``start``, then one second more per reading."""
    ticks = itertools.count()
    return lambda: start + timedelta(seconds=next(ticks))


def user_event(
    text: str = "hello", *, op: Any = APPEND, sources: Any = None, seq: int | None = None
) -> UserMessage:
    """A user message event, not yet appended: ``op`` and ``sources`` are passed through unchecked
    (``op=None`` or a bad ``sources`` build the events the validators must refuse)."""
    message = Message(id=f"m-{text}", role="user", content=(TextBlock(text),))
    extra: dict[str, Any] = {} if seq is None else {"seq": seq}
    return UserMessage(message=message, surface_op=op, source_event_seqs=sources, **extra)


def user(session: Session, text: str, msg_id: str | None = None) -> int:
    event = session.append(
        UserMessage(
            message=Message(id=msg_id or f"u{len(session)}", role="user", content=(TextBlock(text),)),
            surface_op="append",
        )
    )
    return event.seq


def start_turn(
    session: Session, *, window: int | None = 4000, system: str | None = "You are a test agent."
) -> int:
    turn = session.structure.next_turn
    session.append(TurnStart(turn=turn))
    if session.last_of("request/header") is None:
        session.append(
            RequestHeader(provider="test", model="test-model", system=system, context_window=window)
        )
    return turn


def end_turn(session: Session) -> None:
    assert session.open_turn is not None
    session.append(TurnEnd(turn=session.open_turn, reason=TurnEndReason("completed")))


def tool_step(
    session: Session,
    n_calls: int = 1,
    output: str = "ok",
    text: str = "working",
    close: bool = True,
) -> tuple[int, list[int]]:
    """One step: an assistant message with ``n_calls`` bash calls and their results."""
    turn = session.open_turn
    assert turn is not None
    step = session.structure.next_step
    session.append(StepStart(turn=turn, step=step))
    calls = tuple(
        ToolCallBlock(f"c{len(session)}-{i}", "bash", json.dumps({"command": f"cat src/mod_{step}_{i}.py"}))
        for i in range(n_calls)
    )
    assistant = session.append(
        AssistantMessage(
            turn=turn,
            step=step,
            message=Message(
                id=f"a{len(session)}",
                role="assistant",
                content=(TextBlock(text), *calls),
                source=MODEL,
            ),
            surface_op="append",
        )
    )
    results: list[int] = []
    if not close:
        return assistant.seq, results
    for call in calls:
        call_event = session.append(
            ToolCall(turn=turn, step=step, call_id=call.id, name=call.name, arguments=call.arguments)
        )
        result = session.append(
            ToolResult(
                turn=turn,
                step=step,
                message=Message(
                    id=f"r{len(session)}",
                    role="user",
                    content=(ToolResultBlock(call.id, (TextBlock(output),)),),
                    source=Source(kind="tool", call_id=call.id),
                ),
                surface_op="append",
                source_event_seqs=(call_event.seq,),
            )
        )
        results.append(result.seq)
    session.append(StepEnd(turn=turn, step=step))
    return assistant.seq, results


def answer_step(session: Session, text: str = "done") -> int:
    """One step: an assistant message with no tool calls (the turn's answer); its seq."""
    assistant, _ = tool_step(session, n_calls=0, text=text)
    return assistant


def turn(
    session: Session,
    prompt: str = "task",
    *,
    steps: int = 1,
    n_calls: int = 1,
    output: str = "ok",
    answer: str = "done",
    window: int | None = 4000,
) -> int:
    """One complete turn: the user's prompt, ``steps`` tool steps of ``n_calls`` bash calls each,
    the final answer, the turn's end. Returns the turn number."""
    user(session, prompt)
    number = start_turn(session, window=window)
    for _ in range(steps):
        tool_step(session, n_calls=n_calls, output=output)
    answer_step(session, answer)
    end_turn(session)
    return number


# ---------------------------------------------------------------- comparing sessions


def log_types(session: Session, start: int = 0) -> list[str]:
    """The type of every event from seq ``start`` on, in log order."""
    return [event.TYPE for event in session.events(start)]


def _balance(session: Session) -> object:
    """The surface's cut balances, or where the surface is corrupt."""
    try:
        return list(session.surface.cuts())
    except CorruptSurfaceError as e:
        return ("corrupt", e.seq)


def state_of(session: Session) -> tuple[object, ...]:
    """Everything the folds derive from the log: what a refused append or a rollback must leave
    untouched, and what a replay, a snapshot or a store round trip must reproduce. (Not
    ``saved_length``, which says what was saved, not what the log holds.)"""
    return (
        len(session),
        list(session.nodes),
        list(session.surface.deltas),
        session.surface.generation,
        session.derive_messages(),
        _balance(session),
        session.structure.state(),
        dict(session.last_by_type),
        dict(session.type_counts),
        session.first_user_seq,
    )


# ---------------------------------------------------------------- the command line


def run_json(*argv: str) -> tuple[int, Doc]:
    """Run the ``compaction`` command line in-process with ``--json``: its exit code and the one
    JSON document it printed. Captures stdout itself, so module-scoped fixtures can use it."""
    from compaction.cli.main import main  # not at the top: most tests never run the CLI

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*argv, "--json"])
    return code, json.loads(out.getvalue())


def run_human(*argv: str) -> tuple[int, str, str]:
    """Run the ``compaction`` command line in-process without ``--json``: exit code, stdout, stderr."""
    from compaction.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


# ---------------------------------------------------------------- other processes


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Return once ``condition()`` holds; fail naming ``what`` after ``timeout`` seconds. For
    conditions another process makes true (a marker file, its rows in a database): there is no
    event to wait on across processes, so this polls every 10 ms."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


def run_python(code: str, *args: str) -> str:
    """Run ``code`` (dedented) with ``args`` in a fresh interpreter at the repository root, for
    what depends on a process's imports and registries; its stdout (a failure shows stderr)."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
