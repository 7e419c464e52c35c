"""One compaction decision on a 100,000-message session, against the same decision at 1,000 messages.

A decision is what the pre-step hook does before a summary is requested: measure the request (system
prompt + tools + surface) and, over the threshold, select the span (the retention walk from the tail
and the snap to a balanced cut). The session is a surface of N messages (tool-heavy agent steps, never
compacted). Two rows: *cold* (a fresh meter: every message priced once, the first check after a
process start or a snapshot load) and *warm* (the steady state: one agent step appended since the
previous check). The selected span is a range of surface positions until a compaction reads its
seqs, so the warm decision is flat: target <= 2x from 1,000 to 100,000 messages. The
cold one prices every node in one batch (``Meter.event_prices``); its target against the
peers measured in the same run is in ``bench_peers``. The 1.4 s quoted for the fastest Python
peer's decision on a 100k-message session is from elsewhere; the ratios here are large vs small,
measured in this run.

    .venv/bin/python -m benchmarks.bench_decision
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import Result, best_of, fmt_seconds, timed
from compaction.engine.meters import HeuristicMeter
from compaction.engine.selection import select_span
from compaction.sessions.blocks import Message, Source, TextBlock, ToolCallBlock, ToolResultBlock
from compaction.sessions.events import (
    AssistantMessage,
    RequestHeader,
    SessionEvent,
    StepEnd,
    StepStart,
    ToolCall,
    ToolResult,
    TurnStart,
    UserMessage,
)
from compaction.sessions.session import Session
from compaction.vocabulary.config import BasicConfig

SMALL = 1_000
LARGE = 100_000
PEER_SECONDS = 1.4
WARM_GROWTH_TARGET = 2.0
MODEL = Source(kind="model", provider="bench", model="bench-1")


def session_with_messages(count: int) -> Session:
    """``count`` surface messages: a task, then steps of one assistant call + its result."""
    session = Session()
    task = Message(id="task", role="user", content=(TextBlock("Fix every failing test in src/."),))
    session.append(UserMessage(message=task, surface_op="append"))
    session.append(TurnStart(turn=1))
    session.append(
        RequestHeader(provider="bench", model="bench-1", system="You fix code.", context_window=200_000)
    )
    while len(session.nodes) < count:
        add_step(session, session.structure.next_step)
    return session


def add_step(session: Session, step: int) -> None:
    command = f"pytest tests/test_mod_{step % 97}.py -q"
    call = ToolCallBlock(f"c{step}", "bash", f'{{"command": "{command}"}}')
    session.append(StepStart(turn=1, step=step))
    text = TextBlock(f"Running the tests for module {step % 97}.")
    session.append(
        AssistantMessage(
            turn=1,
            step=step,
            surface_op="append",
            message=Message(id=f"a{step}", role="assistant", content=(text, call), source=MODEL),
        )
    )
    dispatched = session.append(
        ToolCall(turn=1, step=step, call_id=call.id, name="bash", arguments=call.arguments)
    )
    output = f"FAILED tests/test_mod_{step % 97}.py::test_case - AssertionError: expected 3, got 2\n" * 4
    result = Message(
        id=f"r{step}",
        role="user",
        source=Source(kind="tool", call_id=call.id),
        content=(ToolResultBlock(call.id, (TextBlock(output),)),),
    )
    session.append(
        ToolResult(
            turn=1, step=step, message=result, surface_op="append", source_event_seqs=(dispatched.seq,)
        )
    )
    session.append(StepEnd(turn=1, step=step))


def decide(session: Session, meter: HeuristicMeter) -> bool:
    _, retain = BasicConfig().budget(200_000)
    meter.measure(session)
    return select_span(session, meter, retain) is not None


def cold(session: Session) -> float:
    """A fresh meter on a session with no published prices (a meter's earlier ones forgotten)."""
    session.price_columns.clear()
    return timed(lambda: decide(session, HeuristicMeter()))


class NodeByNodeMeter(HeuristicMeter):
    """The same prices, one node at a time (``Meter.event`` per node, as before the batch pricing)."""

    def event(self, event: SessionEvent) -> int:
        return super().event(event)


def cold_node_by_node(session: Session) -> float:
    session.price_columns.clear()
    return timed(lambda: decide(session, NodeByNodeMeter()))


def warm(session: Session, meter: HeuristicMeter) -> float:
    add_step(session, session.structure.next_step)
    return timed(lambda: decide(session, meter))


def run() -> list[Result]:
    sizes = {n: session_with_messages(n) for n in (SMALL, LARGE)}
    results: list[Result] = []
    cold_times = {n: best_of(3, lambda s=s: cold(s)) for n, s in sizes.items()}  # type: ignore[misc]
    one_by_one = best_of(3, lambda: cold_node_by_node(sizes[LARGE]))
    warm_times: dict[int, float] = {}
    for n, session in sizes.items():
        meter = HeuristicMeter()
        decide(session, meter)
        warm_times[n] = best_of(20, lambda s=session, m=meter: warm(s, m))  # type: ignore[misc]
    results.append(
        Result(
            f"compaction decision, cold meter, {LARGE:,}-message session (peer: {PEER_SECONDS} s)",
            fmt_seconds(cold_times[LARGE]),
            f"{SMALL:,} messages {fmt_seconds(cold_times[SMALL])}; "
            f"{PEER_SECONDS / cold_times[LARGE]:.0f}x under the peer's 1.4 s",
            cold_times[LARGE] / cold_times[SMALL],
            None,
            False,
        )
    )
    results.append(
        Result(
            f"compaction decision, cold meter, {LARGE:,}-message session, batched pricing vs node by node",
            fmt_seconds(cold_times[LARGE]),
            f"node by node (Meter.event per node) {fmt_seconds(one_by_one)}",
            cold_times[LARGE] / one_by_one,
            None,
            False,
        )
    )
    results.append(
        Result(
            f"compaction decision, warm (one step since the last check), {LARGE:,}-message session",
            fmt_seconds(warm_times[LARGE]),
            f"{SMALL:,} messages {fmt_seconds(warm_times[SMALL])}; "
            f"{PEER_SECONDS / warm_times[LARGE]:.0f}x under the peer's 1.4 s",
            warm_times[LARGE] / warm_times[SMALL],
            WARM_GROWTH_TARGET,
            False,
        )
    )
    return results


def main() -> int:
    from benchmarks.run import table

    results = run()
    print(table(results))
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
