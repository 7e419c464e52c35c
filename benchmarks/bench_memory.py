"""Memory of a long-lived process that compacts one session after another and drops each.

One process, one compaction service (as a server holds it), builds :data:`SESSIONS` distinct
sessions in turn, each one turn of a task and :data:`MESSAGES` messages (tool steps whose results
are :data:`OUTPUT_CHARS`-character outputs, every session's text its own), reads each ahead as an
agent loop's pressure checks do (``observe`` after every step), compacts it (``compact_now``: the
template summarizer, the completion, the fidelity gate, the commit, in memory) and drops it. What
the library keeps of a session must go with it: the resident set after the last session may exceed
the one after session :data:`EARLY` by at most :data:`GROWTH_TARGET` times (what the interpreter's
allocator keeps of freed memory varies between runs; a process that keeps every session's facts
grows with the number of sessions), and a weak reference to a dropped session (and to the per-session
analysis the service held for it) is dead after a garbage collection.

    .venv/bin/python -m benchmarks.bench_memory
"""

from __future__ import annotations

import asyncio
import gc
import os
import resource
import sys
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import Result
from compaction.handover.analysis import ANALYSIS_BYTES, SpanAnalysis
from compaction.service import BasicCompactService
from compaction.sessions.blocks import Message, Source, TextBlock, ToolCallBlock, ToolResultBlock
from compaction.sessions.events import (
    AssistantMessage,
    SessionEvent,
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
from compaction.vocabulary.config import BasicConfig

SESSIONS = 100
EARLY = 20
MESSAGES = 600
"""Messages of one session: the task, two per tool step (the call and its result), the answer."""
OUTPUT_CHARS = 8_000
ERROR_EVERY = 10
"""Every this many steps a tool result is a failure (a traceback), so the error facts are read too."""
GROWTH_TARGET = 1.3
MODEL = Source(kind="model", provider="bench", model="bench-1")


# ---------------------------------------------------------------- one session


def output(session: int, step: int) -> str:
    """A tool output of about :data:`OUTPUT_CHARS` characters, unlike any other session's."""
    if step % ERROR_EVERY == 0:
        head = (
            "Traceback (most recent call last):\n"
            f'  File "src/pkg_{session}/mod_{step}.py", line {step}, in run\n'
            f"ValueError: bad value {session:08x}{step:08x} in src/pkg_{session}/mod_{step}.py\n"
        )
    else:
        head = f"ok: src/pkg_{session}/mod_{step}.py\n"
    line = f"session {session} step {step}: src/pkg_{session}/mod_{step}.py:{{}} checked\n"
    lines = [head]
    size = len(head)
    number = 0
    while size < OUTPUT_CHARS:
        number += 1
        text = line.format(number)
        lines.append(text)
        size += len(text)
    return "".join(lines)[:OUTPUT_CHARS]


def tool_step(session: int, step: int) -> list[SessionEvent]:
    call_id = f"call-{session}-{step}"
    arguments = f'{{"command": "pytest -x tests/pkg_{session}/test_mod_{step}.py"}}'
    assistant = Message(
        id=f"a{session}.{step}",
        role="assistant",
        content=(
            TextBlock(f"Now I run the tests of src/pkg_{session}/mod_{step}.py."),
            ToolCallBlock(id=call_id, name="bash", arguments=arguments),
        ),
        source=MODEL,
    )
    block = ToolResultBlock(
        tool_call_id=call_id,
        content=(TextBlock(output(session, step)),),
        is_error=step % ERROR_EVERY == 0,
    )
    result = Message(
        id=f"r{session}.{step}", role="user", content=(block,), source=Source(kind="tool", call_id=call_id)
    )
    return [
        StepStart(turn=1, step=step),
        AssistantMessage(turn=1, step=step, message=assistant, surface_op="append"),
        ToolCall(turn=1, step=step, call_id=call_id, name="bash", arguments=arguments),
        ToolResult(turn=1, step=step, message=result, surface_op="append"),
        StepEnd(turn=1, step=step),
    ]


def steps(session: int) -> Iterator[list[SessionEvent]]:
    """The session's events, one agent step at a time (as the loop appends them)."""
    task = Message(
        id=f"u{session}", role="user", content=(TextBlock(f"Fix the failing tests of src/pkg_{session}/"),)
    )
    yield [TurnStart(turn=1), UserMessage(message=task, surface_op="append")]
    last = (MESSAGES - 2) // 2 + 1
    for step in range(1, last):
        yield tool_step(session, step)
    answer = Message(
        id=f"a{session}.end", role="assistant", content=(TextBlock("All pass now."),), source=MODEL
    )
    yield [
        StepStart(turn=1, step=last),
        AssistantMessage(turn=1, step=last, message=answer, surface_op="append"),
        StepEnd(turn=1, step=last),
        TurnEnd(turn=1, reason=TurnEndReason(kind="completed")),
    ]


@dataclass(frozen=True)
class Dropped:
    """What is left of a session compacted and dropped: weak references to it and to its analysis,
    and the analysis's size (approximate bytes, as it counts them)."""

    session: weakref.ref[Session]
    analysis: weakref.ref[SpanAnalysis]
    analysis_bytes: int

    def released(self) -> bool:
        return self.session() is None and self.analysis() is None


def compacted(service: BasicCompactService, index: int) -> Dropped:
    """Build session ``index`` (read ahead after every step), compact it, drop it."""
    session = Session()
    for batch in steps(index):
        session.append_all(batch)
        service.observe(session)
    assert len(session.nodes) == MESSAGES
    result = asyncio.run(service.compact_now(session))
    assert result is not None
    analysis = service.read_ahead.analysis(session)
    return Dropped(weakref.ref(session), weakref.ref(analysis), analysis.bytes)


# ---------------------------------------------------------------- the run


def resident_bytes() -> int:
    """The resident set now (``/proc/self/statm``), else the peak (``getrusage``, kB on Linux)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


@dataclass
class Figures:
    resident: dict[int, int]
    """Resident bytes after each session (1-based), after a collection."""
    seconds: float
    released: bool
    """Every dropped session and its analysis were released (weak references dead after a
    collection), and the service holds no analysis."""
    analysis_bytes: int
    """The largest analysis of a session, approximate bytes."""


def measure(sessions: int = SESSIONS) -> Figures:
    service = BasicCompactService(BasicConfig(min_identifier_ratio=0.0))
    resident: dict[int, int] = {}
    released = True
    largest = 0
    started = time.perf_counter()
    for index in range(1, sessions + 1):
        dropped = compacted(service, index)
        gc.collect()
        released = released and dropped.released() and not len(service.read_ahead)
        largest = max(largest, dropped.analysis_bytes)
        resident[index] = resident_bytes()
    return Figures(resident, time.perf_counter() - started, released, largest)


def megabytes(size: int) -> str:
    return f"{size / 2**20:.1f} MB" if size < 10 * 2**20 else f"{size / 2**20:.0f} MB"


def results(figures: Figures, early: int = EARLY) -> list[Result]:
    last = max(figures.resident)
    first, final = figures.resident[early], figures.resident[last]
    shape = f"{MESSAGES} messages, {OUTPUT_CHARS:,}-character tool outputs"
    return [
        Result(
            name=f"memory: resident set after {last} sessions compacted in turn and dropped ({shape}; "
            f"{figures.seconds:.0f} s in all)",
            measured=megabytes(final),
            baseline=f"after session {early}: {megabytes(first)}",
            ratio=final / first,
            target=GROWTH_TARGET,
            higher_is_better=False,
        ),
        Result(
            name="memory: every dropped session and its analysis released (weak references to both dead "
            "after gc.collect(), the service holding no analysis)",
            measured="released" if figures.released else "still alive",
            baseline=f"largest analysis while its session lived: ~{megabytes(figures.analysis_bytes)} "
            f"(bound {megabytes(ANALYSIS_BYTES)})",
            ratio=1.0 if figures.released else 0.0,
            target=1.0,
            higher_is_better=True,
        ),
    ]


def run() -> list[Result]:
    return results(measure())


def main(argv: list[str] | None = None) -> int:
    from benchmarks.run import table

    result = run()
    print(table(result))
    return 0 if all(r.passed for r in result) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
