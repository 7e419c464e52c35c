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
- Google ADK's token-threshold compaction, as its ``CompactionRequestProcessor`` runs it before a
  model call (``apps/compaction.py``), on the same messages as ADK session events
  (:func:`to_adk`, text, ``function_call`` and ``function_response`` parts): its decision
  (rewinds applied, the prompt measured by ``_latest_prompt_token_count``, which falls back to
  ``_estimate_prompt_token_count`` since the events carry no model usage, the events to compact
  chosen by ``_events_to_compact_for_token_threshold``, the range priced by
  ``_is_range_worth_compacting``) and its full compaction (the decision, then
  ``LlmEventSummarizer.maybe_summarize_events`` on a stub ``BaseLlm``, a fixed reply, on the
  run's one event loop; the output is the retained events plus the compaction event; ADK's
  tracing wrapper, which also prices the saving, and the append to a session service are left
  out). ADK retains by event count (``event_retention_size``), not tokens: each list gets the
  count of its newest events that holds the retained tail's tokens by ADK's own estimate
  (:func:`adk_retention`, characters / 4), so it keeps about the tokens the others keep;
- this project: the *cold* decision (the first pressure check of a process that just loaded the
  session from its snapshot, which carries the node prices the agent loop's pressure checks found:
  a fresh meter sums them, then the retention cut; for information also a fresh meter on a session
  whose prices were never stored, every node priced), the *warm* decision (the same meter after
  one more message) and a full compaction
  (``BasicCompactService.compact_to_fit``: decision, template summary, completion, fidelity gate,
  commit, in memory). The library reads each message once as it arrives (the pressure check's
  read-ahead from half the threshold, :mod:`compaction.handover.readahead`: its facts, identifiers, hash
  and price), so the session is first read by ``service.observe`` of a new service (nothing read
  before), timed apart and reported per message, then compacted. Then the compaction with nothing
  read ahead in this process: a process that loads the session from its SQLite snapshot (the one
  the cold decision loads; the load is not timed) and compacts it at once with a new service; the
  snapshot carries what the writer's read-ahead folded (the span's facts, identifiers and event
  digests, :mod:`compaction.handover.facts_fold`), so the span's messages are not fetched.

Every contender gets the same budget: a 200,000-token window, summarizing over the threshold and
keeping the retained tail (``BasicConfig().budget``; for ADK, ``token_threshold`` and the event
count above). The peers' inputs (LangChain messages, ADK events) are built once per list, outside
the timing. Each output is checked for orphaned tool results (a result whose call is not before
it) and for the session's first user message (kept or not); the figures are in the baseline
column.

Targets: cold decision at 100k <= 0.1x the fastest peer's decision; full compaction <=
0.5x the fastest peer's full compaction at every size; warm decision 100k / 1k <= 2x;
the full compaction with nothing read ahead <= 0.5x the fastest peer's full compaction at 100k. The fastest
peer is taken over every peer, ADK included. ADK is the slowest peer at every size (seconds per
transcript at 100k), so a full run takes about a quarter of an hour.

``--quick`` (:data:`QUICK`) times every contender at 100k only, one round, and this project's
decisions also at 1k, so every target row is still computed and judged (the warm decision's growth
is 1k -> 100k): a few minutes on 2 cores, for checking a change to the compaction path; the figures
of record come from the full run.

Needs the ``bench`` extra (``pip install -e ".[bench]"``)::

    .venv/bin/python -m benchmarks.run peers
    .venv/bin/python -m benchmarks.run peers --quick
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
from uuid import UUID

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import Result, fmt_seconds, scratch_dir, timed
from benchmarks.peer_workload import SOURCES, base_messages, build_session, scaled
from compaction.engine.meters import HeuristicMeter
from compaction.engine.selection import select_span
from compaction.service import BasicCompactService
from compaction.sessions.blocks import Message, TextBlock, ToolCallBlock, ToolResultBlock
from compaction.sessions.events import UserMessage
from compaction.sessions.session import Session, project
from compaction.sessions.store import SessionStore
from compaction.vocabulary.config import BasicConfig

SIZES = tuple(int(n) for n in os.environ.get("BENCH_PEERS_SIZES", "1000,10000,100000").split(","))
ROUNDS = int(os.environ.get("BENCH_PEERS_ROUNDS", "3"))
QUICK_SIZE = 100_000
GROWTH_FROM = 1_000
WINDOW = 200_000
COLD_TARGET = 0.1
FULL_TARGET = 0.5
WARM_GROWTH_TARGET = 2.0

DECISIONS = ("trim_messages", "SummarizationMiddleware decision", "Google ADK decision")
FULLS = ("SummarizationMiddleware full", "langmem summarize_messages", "Google ADK full")
STUB_SUMMARY = "## Summary\nstub summary of the earlier conversation"
ADK_AGENT = "agent"
OURS = (
    "this project cold decision",
    "this project warm decision",
    "this project full compaction",
    "this project full compaction, nothing read ahead",
    "this project read-ahead as the messages arrived",
    "this project cold decision, nothing stored",
)


@dataclass(frozen=True)
class Plan:
    """What one run times: every contender at ``sizes``, ``rounds`` times; this project's decisions
    also at ``growth_from``, the size the warm decision's growth is measured from."""

    sizes: tuple[int, ...]
    rounds: int
    growth_from: int

    @property
    def decision_sizes(self) -> tuple[int, ...]:
        """Every size this project's decisions are timed at."""
        return tuple(sorted({*self.sizes, self.growth_from}))


FULL = Plan(sizes=SIZES, rounds=ROUNDS, growth_from=min(SIZES))
QUICK = Plan(sizes=(QUICK_SIZE,), rounds=1, growth_from=GROWTH_FROM)


def available() -> bool:
    """Whether the ``bench`` extra is installed."""
    try:
        import google.adk.apps.compaction  # noqa: F401
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


def to_adk(messages: Sequence[Message]) -> list[Any]:
    """The same messages as ADK session events: a user message starts an invocation; an assistant
    message is a model event (text, ``function_call`` parts with id, name and args); tool results
    are a function-response event (``function_response`` parts with id, name and ``{"result": ...}``
    or ``{"error": ...}``), authored by the agent as ADK's own are. Reasoning is left out, as in
    :func:`to_langchain`. Timestamps increase by a second per event."""
    from google.adk.events.event import Event
    from google.genai import types

    names: dict[str, str] = {}
    out: list[Any] = []
    invocation = Event.new_id()
    for index, message in enumerate(messages):
        text = "\n".join(b.text for b in message.content if isinstance(b, TextBlock))
        results = [b for b in message.content if isinstance(b, ToolResultBlock)]
        parts: list[types.Part] = []
        if message.role == "assistant":
            author, role = ADK_AGENT, "model"
            parts = [types.Part(text=text)] if text else []
            for b in message.content:
                if isinstance(b, ToolCallBlock):
                    names[b.id] = b.name
                    call = types.FunctionCall(id=b.id, name=b.name, args=_args(b.arguments))
                    parts.append(types.Part(function_call=call))
        elif results:
            author, role = ADK_AGENT, "user"
            for block in results:
                body = "\n".join(b.text for b in block.content if isinstance(b, TextBlock))
                response = types.FunctionResponse(
                    id=block.tool_call_id,
                    name=names.get(block.tool_call_id, "tool"),
                    response={"error" if block.is_error else "result": body},
                )
                parts.append(types.Part(function_response=response))
        else:
            author, role = "user", "user"
            invocation = Event.new_id()
            parts = [types.Part(text=text)]
        out.append(
            Event(
                id=message.id,
                invocation_id=invocation,
                author=author,
                timestamp=1_700_000_000.0 + index,
                content=types.Content(role=role, parts=parts),
            )
        )
    return out


def adk_retention(events: Sequence[Any], retain: int) -> int:
    """ADK retains by event count (``event_retention_size``): the count of newest events whose
    tokens, by ADK's own estimate (characters of text, call args and responses / 4), add up to
    ``retain``, so ADK keeps about the tokens the other contenders keep."""
    from google.adk.apps.compaction import _count_chars_in_content

    chars = 0
    for kept, event in enumerate(reversed(events)):
        chars += _count_chars_in_content(event.content)
        if chars // 4 > retain:
            return kept
    return len(events)


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


def check_adk(before: Sequence[Any], after: Sequence[Any]) -> tuple[int, bool]:
    """The same checks on ADK events: function responses whose call is not before them, and the
    first user event (a user text, not a function response) kept or not."""
    first = next(e.id for e in before if e.author == "user" and not e.get_function_responses())
    seen: set[str] = set()
    orphans = 0
    for event in after:
        seen.update(str(c.id) for c in event.get_function_calls())
        orphans += sum(1 for r in event.get_function_responses() if r.id not in seen)
    return orphans, any(e.id == first for e in after)


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

    return FakeListChatModel(responses=[STUB_SUMMARY])


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


def adk_config(threshold: int, retention: int) -> Any:
    """ADK's token-threshold compaction settings (``EventsCompactionConfig``) with the summarizer
    on a stub model (a fixed summary: no model time)."""
    from google.adk.apps.app import EventsCompactionConfig
    from google.adk.apps.llm_event_summarizer import LlmEventSummarizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ADK's "experimental" notices
        return EventsCompactionConfig(
            token_threshold=threshold,
            event_retention_size=retention,
            summarizer=LlmEventSummarizer(llm=_adk_stub_model()),
        )


def _adk_stub_model() -> Any:
    from collections.abc import AsyncGenerator

    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types

    class StubLlm(BaseLlm):
        """A model that answers every request with the same summary."""

        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=STUB_SUMMARY)]))

    return StubLlm(model="stub")


def adk_runs(loop: asyncio.AbstractEventLoop) -> dict[str, Callable[[list[Any], Any], list[Any]]]:
    """ADK's token-threshold compaction as ``_run_compaction_for_token_threshold_config`` runs it
    before a model call (ADK's ``CompactionRequestProcessor``, for the agent that authored the
    events), on the events of a session: the decision (rewinds applied, the prompt measured, the
    events to compact chosen, the range priced) and the full compaction (the decision, then the
    summarizer on the stub model, on the run's one event loop). The output is the retained events
    (plus the compaction event, for the full one)."""
    from google.adk.apps.compaction import (
        _events_to_compact_for_token_threshold,
        _is_range_worth_compacting,
        _latest_prompt_token_count,
    )
    from google.adk.events._rewind_events import _apply_rewinds

    def choose(events: list[Any], config: Any) -> tuple[list[Any], list[Any]]:
        live = _apply_rewinds(events)
        scoped = [e for e in live if e.isolation_scope is None]
        tokens = _latest_prompt_token_count(live, current_branch=None, agent_name=ADK_AGENT)
        if tokens is None or tokens < config.token_threshold:
            return scoped, []
        chosen = _events_to_compact_for_token_threshold(
            events=scoped, event_retention_size=config.event_retention_size
        )
        if not chosen or not _is_range_worth_compacting(events=scoped, events_to_compact=chosen):
            return scoped, []
        return scoped, chosen

    def retained(scoped: list[Any], chosen: list[Any]) -> list[Any]:
        gone = {id(e) for e in chosen}
        return [e for e in scoped if id(e) not in gone]

    def decision(events: list[Any], config: Any) -> list[Any]:
        return retained(*choose(events, config))

    def full(events: list[Any], config: Any) -> list[Any]:
        scoped, chosen = choose(events, config)
        if not chosen:
            return scoped
        summary = loop.run_until_complete(config.summarizer.maybe_summarize_events(events=chosen))
        kept = retained(scoped, chosen)
        return kept if summary is None else [*kept, summary]

    return {"Google ADK decision": decision, "Google ADK full": full}


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


def measure(plan: Plan = FULL) -> Figures:
    threshold, retain = BasicConfig().budget(WINDOW)
    runs = peer_runs(threshold, retain)
    bases = {source: base_messages(source) for source in SOURCES}
    lists = {(s, n): scaled(bases[s], n) for s in SOURCES for n in plan.decision_sizes}
    compared = [key for key in lists if key[1] in plan.sizes]
    chains = {key: to_langchain(lists[key]) for key in compared}
    adk_events = {key: to_adk(lists[key]) for key in compared}
    adk_configs = {
        key: adk_config(threshold, adk_retention(events, retain)) for key, events in adk_events.items()
    }
    figures = Figures()
    # One event loop for every compaction of the run, as an agent backend has: ``asyncio.run``
    # would time a new loop and its signal handlers on each call (about 0.2 ms), which the peers
    # (synchronous) do not pay either. ADK's full compaction (async) runs on it too.
    loop = asyncio.new_event_loop()
    adk = adk_runs(loop)
    with (
        scratch_dir("peers") as tmp,
        SessionStore.open(f"sqlite:///{tmp / 'sessions.db'}", snapshot_interval=1) as store,
    ):
        stored = {key: _stored(store, messages) for key, messages in lists.items()}
        for _round in range(plan.rounds):
            for size in plan.decision_sizes:
                for source in SOURCES:
                    key = (source, size)
                    if key in chains:
                        _time_peers(figures, key, runs, chains[key])
                        _time_adk(figures, key, adk, adk_events[key], adk_configs[key])
                    _time_decisions(figures, key, lists[key], retain, store=store, session_id=stored[key])
                    if key in chains:
                        _time_compactions(figures, key, lists[key], loop, store=store, session_id=stored[key])
    # ADK's summarizer leaves the model's response generator open (it breaks out of it): close it.
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()
    return figures


def _time_peers(
    figures: Figures,
    key: tuple[str, int],
    runs: dict[str, Callable[[list[Any]], list[Any]]],
    chain: list[Any],
) -> None:
    source, size = key
    for who, run in runs.items():
        seconds, out = _timed_peer(run, chain)
        figures.add(who, source, size, seconds)
        figures.checks[(who, source, size)] = check_langchain(chain, out)


def _time_adk(
    figures: Figures,
    key: tuple[str, int],
    adk: dict[str, Callable[[list[Any], Any], list[Any]]],
    events: list[Any],
    config: Any,
) -> None:
    source, size = key
    for who, adk_run in adk.items():
        seconds, out = _timed_adk(adk_run, events, config)
        figures.add(who, source, size, seconds)
        figures.checks[(who, source, size)] = check_adk(events, out)


def _stored(store: SessionStore, messages: list[Message]) -> UUID:
    """The session saved as an agent loop leaves it (priced and read ahead by its pressure checks,
    ``service.observe``) to the embedded SQLite store, with a snapshot, which carries what they
    left (the node prices, the span's folded identifiers)."""
    session = build_session(messages)
    BasicCompactService(BasicConfig(context_window=WINDOW)).observe(session)
    store.save(session)
    return session.id


def _timed_peer(run: Callable[[list[Any]], list[Any]], chain: list[Any]) -> tuple[float, list[Any]]:
    out: list[Any] = []
    return timed(lambda: out.extend(run(list(chain)))), out


def _timed_adk(
    run: Callable[[list[Any], Any], list[Any]], events: list[Any], config: Any
) -> tuple[float, list[Any]]:
    out: list[Any] = []
    return timed(lambda: out.extend(run(list(events), config))), out


def _time_decisions(
    figures: Figures,
    key: tuple[str, int],
    messages: list[Message],
    retain: int,
    *,
    store: SessionStore,
    session_id: UUID,
) -> None:
    """The cold decision: the first pressure check of a process that just loaded the session
    (from its snapshot, which carries the node prices; the load is not timed, bench_load measures
    it); the warm one after one more message; and, for information, a fresh meter on a session
    whose prices were never stored (every node priced)."""
    source, size = key
    session = store.get(session_id)
    meter = HeuristicMeter()
    figures.add(OURS[0], source, size, timed(lambda: decide(session, meter, retain)))
    one_more(session, size)
    figures.add(OURS[1], source, size, timed(lambda: decide(session, meter, retain)))
    bare = build_session(messages)
    figures.add(OURS[5], source, size, timed(lambda: decide(bare, HeuristicMeter(), retain)))


def _time_compactions(
    figures: Figures,
    key: tuple[str, int],
    messages: list[Message],
    loop: asyncio.AbstractEventLoop,
    *,
    store: SessionStore,
    session_id: UUID,
) -> None:
    """The full compaction after the read-ahead (a session built as its messages arrived, read by
    ``service.observe``, timed apart), then the one with nothing read ahead: a process that loads
    the session from its SQLite snapshot (untimed, as for the cold decision) and compacts at once,
    its events fetched from the store during the compaction. Both commit in memory."""
    source, size = key
    fresh = build_session(messages)
    service = BasicCompactService(BasicConfig(context_window=WINDOW))  # a new session: nothing read
    # What the pressure checks of an agent loop do as the messages arrive (from half the threshold
    # on): each message read once for the compaction to come. Timed apart, per message.
    figures.add(OURS[4], source, size, timed(lambda: service.observe(fresh)) / len(messages))
    figures.add(OURS[2], source, size, timed(lambda: loop.run_until_complete(service.compact_to_fit(fresh))))
    figures.checks[(OURS[2], source, size)] = check_session(fresh, messages[0].id)
    again = store.get(session_id)
    # a process that just loaded the session: nothing read yet (its analysis is the service's)
    service = BasicCompactService(BasicConfig(context_window=WINDOW))
    figures.add(OURS[3], source, size, timed(lambda: loop.run_until_complete(service.compact_to_fit(again))))
    figures.checks[(OURS[3], source, size)] = check_session(again, messages[0].id)


UNSTORED_NOTE = " (a fresh meter on a session whose node prices were never stored: every node priced)"
UNREAD_NOTE = (
    " (the first compaction of a process that just loaded the session from its SQLite snapshot, "
    "written after the writer's read-ahead: the span's facts and identifiers come from the folds "
    "the snapshot carries, its event hashes from its carried digests; the template writes from "
    "the facts, so none of the span's messages is fetched)"
)
READ_AHEAD_NOTE = (
    " (the pressure check's share of each agent step once the request is past half the threshold, "
    "paid as each message arrives, not when the agent waits)"
)


def _against(
    figures: Figures,
    who: str,
    size: int,
    peer: str,
    *,
    target: float | None = None,
    note: str = "",
) -> Result:
    """One of this project's rows: its time over the named peer's, the same size."""
    seconds = figures.total(who, size)
    return Result(
        f"peers {size:,} messages: {who} / {peer}",
        fmt_seconds(seconds),
        figures.detail(who, size) + note,
        seconds / figures.total(peer, size),
        target,
        False,
    )


def results(figures: Figures, plan: Plan = FULL) -> list[Result]:
    rows: list[Result] = []
    largest, smallest = max(plan.sizes), plan.growth_from
    for size in plan.sizes:
        fastest_decision = min(DECISIONS, key=lambda who: figures.total(who, size))
        fastest_full = min(FULLS, key=lambda who: figures.total(who, size))
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
        cold_target = COLD_TARGET if size == largest else None
        cold_full_target = FULL_TARGET if size == largest else None
        rows += [
            _against(figures, OURS[0], size, fastest_decision, target=cold_target),
            _against(figures, OURS[5], size, fastest_decision, note=UNSTORED_NOTE),
            _against(figures, OURS[1], size, fastest_decision),
            _against(figures, OURS[2], size, fastest_full, target=FULL_TARGET),
            _against(figures, OURS[3], size, fastest_full, target=cold_full_target, note=UNREAD_NOTE),
        ]
        per_message = figures.total(OURS[4], size) / len(SOURCES)
        full_seconds = figures.total(fastest_full, size)
        rows.append(
            Result(
                f"peers {size:,} messages: {OURS[4]}, per message",
                fmt_seconds(per_message),
                "; ".join(f"{s} {fmt_seconds(figures.median(OURS[4], s, size))}" for s in SOURCES)
                + READ_AHEAD_NOTE,
                per_message / (full_seconds / size / len(SOURCES)),
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


def run(plan: Plan = FULL) -> list[Result]:
    if not available():
        return [
            Result(
                'peers: skipped (the bench extra is not installed: pip install -e ".[bench]")',
                "-",
                "-",
                0.0,
                None,
                False,
            )
        ]
    return results(measure(plan), plan)


def run_quick() -> list[Result]:
    """:func:`run` at 100k only, one round (:data:`QUICK`)."""
    return run(QUICK)


def main(argv: Sequence[str]) -> int:
    from benchmarks.run import table

    unknown = [a for a in argv if a != "--quick"]
    if unknown:
        print(f"unknown argument(s) {unknown}; the one flag is --quick", file=sys.stderr)
        return 2
    rows = run(QUICK if "--quick" in argv else FULL)
    print(table(rows))
    return 0 if all(r.passed for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
