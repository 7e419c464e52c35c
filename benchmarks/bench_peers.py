"""Side by side with the Python peers, in one process, on the same message lists.

The public transcripts (spotter's Claude Code session, pi-mono's large session) are scaled to 1k,
10k and 100k messages (:mod:`benchmarks.peer_workload`) and handed to each contender, timed
interleaved (every round runs every contender at every size before the next round; the median of
the rounds is reported, the two transcripts summed):

- LangChain ``trim_messages`` (the decision only: count, keep the newest ``retain`` tokens,
  start on a human message), with LangChain's approximate counter;
- LangChain ``SummarizationMiddleware``: its decision (count, trigger, cutoff) and its full
  ``before_model`` with a stub chat model (a fixed reply: no model time);
- langmem ``summarize_messages`` (full, stub model);
- this project: the *cold* decision (a fresh meter: every node priced, then the retention cut), the
  *warm* decision (the same meter after one more message) and a full compaction
  (``BasicCompactService.compact_to_fit``: decision, template summary, fidelity gate, commit, in
  memory, every per-message cache emptied first, so the identifiers are found anew), and the same
  compaction again on a fresh copy of the session with those caches full (for information: what a
  compaction costs once the per-message facts were found before).

Every contender gets the same budget: a 200,000-token window, summarizing over the threshold and
keeping the retained tail (``BasicConfig().budget``). Each output is checked for orphaned tool
results (a result whose call is not before it) and for the session's first user message (kept or
not); the figures are in the baseline column.

Targets (issue 13): cold decision at 100k <= 0.1x the fastest peer's decision; full compaction <=
0.5x the fastest peer's full compaction at every size; warm decision 100k / 1k <= 2x.

Needs the ``bench`` extra (``pip install -e ".[bench]"``)::

    .venv/bin/python -m benchmarks.run peers
    BENCH_PEERS_ROUNDS=5 BENCH_PEERS_SIZES=1000,10000 .venv/bin/python -m benchmarks.bench_peers
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import Result, fmt_seconds, timed
from benchmarks.peer_workload import SOURCES, base_messages, build_session, scaled
from compaction.basic import BasicCompactService
from compaction.config import BasicConfig
from compaction.meters import HeuristicMeter
from compaction.selection import select_span
from compaction.sessions.blocks import Message, TextBlock, ToolCallBlock, ToolResultBlock
from compaction.sessions.events import UserMessage
from compaction.sessions.session import Session, project

SIZES = tuple(int(n) for n in os.environ.get("BENCH_PEERS_SIZES", "1000,10000,100000").split(","))
ROUNDS = int(os.environ.get("BENCH_PEERS_ROUNDS", "3"))
WINDOW = 200_000
COLD_TARGET = 0.1
FULL_TARGET = 0.5
WARM_GROWTH_TARGET = 2.0

DECISIONS = ("trim_messages", "SummarizationMiddleware decision")
FULLS = ("SummarizationMiddleware full", "langmem summarize_messages")
OURS = (
    "this project cold decision",
    "this project warm decision",
    "this project full compaction",
    "this project full compaction, per-message facts cached",
)


def available() -> bool:
    """Whether the ``bench`` extra is installed."""
    try:
        import langchain.agents.middleware  # noqa: F401
        import langmem.short_term  # type: ignore[import-untyped]  # noqa: F401
    except ImportError:
        return False
    return True


# ---------------------------------------------------------------- the peers' messages


def to_langchain(messages: Sequence[Message]) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    out: list[Any] = []
    for message in messages:
        text = "\n".join(b.text for b in message.content if isinstance(b, TextBlock))
        if message.role == "assistant":
            calls = [
                {"id": b.id, "name": b.name, "args": _args(b.arguments), "type": "tool_call"}
                for b in message.content
                if isinstance(b, ToolCallBlock)
            ]
            out.append(AIMessage(content=text, tool_calls=calls, id=message.id))
            continue
        results = [b for b in message.content if isinstance(b, ToolResultBlock)]
        for block in results:
            body = "\n".join(b.text for b in block.content if isinstance(b, TextBlock))
            out.append(ToolMessage(content=body, tool_call_id=block.tool_call_id, id=f"{message.id}"))
        if not results:
            out.append(HumanMessage(content=text, id=message.id))
    return out


def _args(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return {"input": arguments}
    return value if isinstance(value, dict) else {"input": value}


def check_langchain(before: Sequence[Any], after: Sequence[Any]) -> tuple[int, bool]:
    """``(orphaned tool results, first user message kept)`` of a peer's output."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    first = next(m.id for m in before if isinstance(m, HumanMessage))
    seen: set[str] = set()
    orphans = 0
    for m in after:
        if isinstance(m, AIMessage):
            seen.update(str(c["id"]) for c in m.tool_calls)
        elif isinstance(m, ToolMessage) and m.tool_call_id not in seen:
            orphans += 1
    return orphans, any(m.id == first for m in after)


def check_session(session: Session, first_id: str) -> tuple[int, bool]:
    """The same checks on this project's surface after a compaction."""
    seen: set[str] = set()
    orphans = 0
    kept = False
    for seq in session.nodes:
        message = project(session.event(seq))
        if message is None:
            continue
        kept = kept or message.id == first_id
        for block in message.content:
            if isinstance(block, ToolCallBlock):
                seen.add(block.id)
            elif isinstance(block, ToolResultBlock) and block.tool_call_id not in seen:
                orphans += 1
    return orphans, kept


# ---------------------------------------------------------------- the contenders


def _stub_model() -> Any:
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    return FakeListChatModel(responses=["## Summary\nstub summary of the earlier conversation"])


def peer_runs(threshold: int, retain: int) -> dict[str, Callable[[list[Any]], list[Any]]]:
    from langchain.agents.middleware import SummarizationMiddleware
    from langchain_core.messages import RemoveMessage
    from langchain_core.messages.utils import count_tokens_approximately, trim_messages
    from langmem.short_term import summarize_messages

    model = _stub_model()

    def trim(messages: list[Any]) -> list[Any]:
        return list(
            trim_messages(
                messages,
                max_tokens=retain,
                token_counter=count_tokens_approximately,
                strategy="last",
                start_on="human",
                include_system=True,
                allow_partial=False,
            )
        )

    def middleware() -> Any:
        return SummarizationMiddleware(model, trigger=("tokens", threshold), keep=("tokens", retain))

    def mw_decision(messages: list[Any]) -> list[Any]:
        mw = middleware()
        total = mw.token_counter(messages)
        if not mw._should_summarize(messages, total):
            return messages
        cutoff = mw._determine_cutoff_index(messages)
        return messages[cutoff:] if cutoff > 0 else messages

    def mw_full(messages: list[Any]) -> list[Any]:
        update = middleware().before_model({"messages": messages}, None)
        if update is None:
            return messages
        return [m for m in update["messages"] if not isinstance(m, RemoveMessage)]

    def langmem(messages: list[Any]) -> list[Any]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = summarize_messages(
                messages,
                running_summary=None,
                model=model,
                max_tokens=threshold,
                max_tokens_before_summary=threshold,
                max_summary_tokens=1024,
            )
        return list(result.messages)

    return {
        "trim_messages": trim,
        "SummarizationMiddleware decision": mw_decision,
        "SummarizationMiddleware full": mw_full,
        "langmem summarize_messages": langmem,
    }


def clear_caches() -> None:
    """Every per-message cache of the library (the full compaction is timed cold)."""
    from compaction import facts, identifiers

    identifiers.clear_cache()
    facts.clear_caches()


def decide(session: Session, meter: HeuristicMeter, retain: int) -> bool:
    meter.measure(session)
    return select_span(session, meter, retain) is not None


def one_more(session: Session, index: int) -> None:
    message = Message(id=f"more-{index}", role="user", content=(TextBlock("Please go on."),))
    session.append(UserMessage(message=message, surface_op="append"))


# ---------------------------------------------------------------- the run


@dataclass
class Figures:
    seconds: dict[tuple[str, str, int], list[float]] = field(default_factory=dict)
    checks: dict[tuple[str, str, int], tuple[int, bool]] = field(default_factory=dict)

    def add(self, who: str, source: str, size: int, seconds: float) -> None:
        self.seconds.setdefault((who, source, size), []).append(seconds)

    def median(self, who: str, source: str, size: int) -> float:
        return statistics.median(self.seconds[(who, source, size)])

    def total(self, who: str, size: int) -> float:
        return sum(self.median(who, source, size) for source in SOURCES)

    def detail(self, who: str, size: int) -> str:
        parts = [f"{s} {fmt_seconds(self.median(who, s, size))}" for s in SOURCES]
        checks = [self.checks[(who, s, size)] for s in SOURCES if (who, s, size) in self.checks]
        if checks:
            orphans = sum(o for o, _ in checks)
            kept = sum(k for _, k in checks)
            parts.append(f"orphaned results {orphans}, first user kept {kept}/{len(checks)}")
        return "; ".join(parts)


def measure(sizes: Sequence[int] = SIZES, rounds: int = ROUNDS) -> Figures:
    threshold, retain = BasicConfig().budget(WINDOW)
    runs = peer_runs(threshold, retain)
    bases = {source: base_messages(source) for source in SOURCES}
    lists = {(s, n): scaled(bases[s], n) for s in SOURCES for n in sizes}
    chains = {key: to_langchain(messages) for key, messages in lists.items()}
    figures = Figures()
    for round_index in range(rounds):
        for size in sizes:
            for source in SOURCES:
                chain = chains[(source, size)]
                for who, run in runs.items():
                    seconds, out = _timed_peer(run, chain)
                    figures.add(who, source, size, seconds)
                    figures.checks[(who, source, size)] = check_langchain(chain, out)
                _time_ours(figures, (source, size), lists[(source, size)], retain, round_index)
    return figures


def _timed_peer(run: Callable[[list[Any]], list[Any]], chain: list[Any]) -> tuple[float, list[Any]]:
    out: list[Any] = []
    return timed(lambda: out.extend(run(list(chain)))), out


def _time_ours(
    figures: Figures, key: tuple[str, int], messages: list[Message], retain: int, round_index: int
) -> None:
    source, size = key
    session = build_session(messages)
    meter = HeuristicMeter()
    figures.add(OURS[0], source, size, timed(lambda: decide(session, meter, retain)))
    one_more(session, round_index)
    figures.add(OURS[1], source, size, timed(lambda: decide(session, meter, retain)))
    fresh = build_session(messages)
    clear_caches()
    service = BasicCompactService(BasicConfig(context_window=WINDOW))
    figures.add(OURS[2], source, size, timed(lambda: asyncio.run(service.compact_to_fit(fresh))))
    figures.checks[(OURS[2], source, size)] = check_session(fresh, messages[0].id)
    again = build_session(messages)  # the same messages: their facts are in the caches now
    service = BasicCompactService(BasicConfig(context_window=WINDOW))
    figures.add(OURS[3], source, size, timed(lambda: asyncio.run(service.compact_to_fit(again))))
    figures.checks[(OURS[3], source, size)] = check_session(again, messages[0].id)


def results(figures: Figures, sizes: Sequence[int] = SIZES) -> list[Result]:
    rows: list[Result] = []
    largest, smallest = max(sizes), min(sizes)
    for size in sizes:
        fastest_decision = min(DECISIONS, key=lambda who: figures.total(who, size))
        fastest_full = min(FULLS, key=lambda who: figures.total(who, size))
        decision_seconds = figures.total(fastest_decision, size)
        full_seconds = figures.total(fastest_full, size)
        for who in (*DECISIONS, *FULLS):
            rows.append(
                Result(
                    f"peers {size:,} messages: {who}",
                    fmt_seconds(figures.total(who, size)),
                    figures.detail(who, size),
                    1.0,
                    None,
                    False,
                )
            )
        cold = figures.total(OURS[0], size)
        rows.append(
            Result(
                f"peers {size:,} messages: {OURS[0]} / {fastest_decision}",
                fmt_seconds(cold),
                figures.detail(OURS[0], size),
                cold / decision_seconds,
                COLD_TARGET if size == largest else None,
                False,
            )
        )
        warm = figures.total(OURS[1], size)
        rows.append(
            Result(
                f"peers {size:,} messages: {OURS[1]} / {fastest_decision}",
                fmt_seconds(warm),
                figures.detail(OURS[1], size),
                warm / decision_seconds,
                None,
                False,
            )
        )
        full = figures.total(OURS[2], size)
        rows.append(
            Result(
                f"peers {size:,} messages: {OURS[2]} / {fastest_full}",
                fmt_seconds(full),
                figures.detail(OURS[2], size),
                full / full_seconds,
                FULL_TARGET,
                False,
            )
        )
        cached = figures.total(OURS[3], size)
        rows.append(
            Result(
                f"peers {size:,} messages: {OURS[3]} / {fastest_full}",
                fmt_seconds(cached),
                figures.detail(OURS[3], size) + " (what a compaction costs once each message's "
                "identifiers and tool-call facts were found earlier, e.g. by a previous compaction)",
                cached / full_seconds,
                None,
                False,
            )
        )
    if largest != smallest:
        grown = figures.total(OURS[1], largest) / figures.total(OURS[1], smallest)
        rows.append(
            Result(
                f"peers: {OURS[1]} growth {smallest:,} -> {largest:,} messages",
                fmt_seconds(figures.total(OURS[1], largest)),
                f"{smallest:,} messages {fmt_seconds(figures.total(OURS[1], smallest))}",
                grown,
                WARM_GROWTH_TARGET,
                False,
            )
        )
    return rows


def run() -> list[Result]:
    if not available():
        return [
            Result(
                "peers: skipped (the bench extra is not installed: pip install -e \".[bench]\")",
                "-",
                "-",
                0.0,
                None,
                False,
            )
        ]
    return results(measure())


def main() -> int:
    from benchmarks.run import table

    rows = run()
    print(table(rows))
    return 0 if all(r.passed for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
