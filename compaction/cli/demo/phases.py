"""The phase-structured workflow of the demo (a damage claim: investigate, conclude, ask for
approval), run twice: once with the checkpoint strategy (rebuild from the typed scratchpad at each
boundary) and once with the summary strategy (manual compaction at each boundary), so the two can be
compared on the same work.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from compaction.engine.meters import HeuristicMeter
from compaction.service import BasicCompactService
from compaction.sessions.events import ToolCall
from compaction.sessions.invariants import DEFAULT_INVARIANTS
from compaction.sessions.loop import AgentLoop, ToolFunction, ToolOutput
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from compaction.strategies.checkpoint import CheckpointCompactService
from compaction.testing import ScriptedModel, reply, tool_call
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.contract import CompactionResult
from compaction.vocabulary.events import PhaseEnd, ScratchpadSet

REQUEST = (
    "Customer ticket T-7731: order 4921 arrived with a cracked screen. Investigate the order, find "
    "the damage policy that applies, compute the credit in cents, and prepare it for approval."
)
POLICY_CHUNKS = {
    "c-8809": "Shipping damage on orders before 2025 falls under policy v5 (superseded).",
    "c-8810": "Policy v6 covers cosmetic damage only; screens are excluded.",
    "c-8811": "Returns within 30 days are refunded in full when the seal is intact.",
    "c-8812": "Policy v7: functional damage on arrival is credited at 25% of the order total.",
}


@dataclass
class PhaseRun:
    strategy: str
    session: Session
    boundaries: list[dict[str, Any]] = field(default_factory=list)


def _tools() -> dict[str, ToolFunction]:
    async def lookup_order(arguments: str) -> ToolOutput:
        order = json.loads(arguments)["order_id"]
        record = {
            "order_id": order,
            "total_cents": 100000,
            "items": ["phone X2"],
            "history": ["shipped"] * 40,
        }
        return ToolOutput(json.dumps(record))

    async def search_policy(arguments: str) -> ToolOutput:
        chunk = json.loads(arguments)["chunk"]
        return ToolOutput(f"[{chunk}] {POLICY_CHUNKS[chunk]} " + "Clause detail and legal boilerplate. " * 60)

    async def compute_credit(arguments: str) -> ToolOutput:
        args = json.loads(arguments)
        return ToolOutput(json.dumps({"credit_cents": args["total_cents"] * args["percent"] // 100}))

    return {"lookup_order": lookup_order, "search_policy": search_policy, "compute_credit": compute_credit}


@dataclass(frozen=True)
class _Phase:
    name: str
    prompt: str
    calls: tuple[tuple[str, dict[str, Any]], ...]
    conclusion: str
    values: tuple[tuple[str, str, Callable[[dict[str, Any]], Any]], ...]  # key, tool, pick from output


PHASES = (
    _Phase(
        "investigate",
        REQUEST,
        (("lookup_order", {"order_id": "4921"}), *(("search_policy", {"chunk": c}) for c in POLICY_CHUNKS)),
        "Policy v7 applies (chunk c-8812): functional damage on arrival, credited at 25% of the total.",
        (
            ("order_id", "lookup_order", lambda out: out["order_id"]),
            ("order_total_cents", "lookup_order", lambda out: out["total_cents"]),
        ),
    ),
    _Phase(
        "compute-credit",
        "Compute the credit under the policy you found.",
        (("compute_credit", {"total_cents": 100000, "percent": 25}),),
        "Credit computed: 25000 cents for order 4921 under policy v7; approval needed.",
        (("credit_cents", "compute_credit", lambda out: out["credit_cents"]),),
    ),
)


def _script(phase: _Phase, index: int) -> ScriptedModel:
    steps = [
        reply("Checking.", tool_call(name, args, f"p{index}-c{k}"), message_id=f"p{index}-m{k}")
        for k, (name, args) in enumerate(phase.calls)
    ]
    return ScriptedModel([*steps, reply(phase.conclusion, message_id=f"p{index}-final")])


def _record_state(session: Session, phase: _Phase, turn_start: int) -> None:
    """The harness writes the typed state from the tool outputs, naming each producing call."""
    outputs: dict[str, tuple[str, Any]] = {}
    for event in session.events(turn_start):
        if isinstance(event, ToolCall):
            outputs.setdefault(event.name, (event.call_id, None))
        if event.TYPE == "tool/result":
            call_id = event.message.source.call_id  # type: ignore[attr-defined]
            for name, (cid, _) in outputs.items():
                if cid == call_id:
                    text = event.message.content[0].content[0].text  # type: ignore[attr-defined]
                    try:
                        outputs[name] = (cid, json.loads(text))
                    except json.JSONDecodeError:
                        outputs[name] = (cid, text)
    for key, tool, pick in phase.values:
        call_id, output = outputs[tool]
        session.append(ScratchpadSet(key=key, value=pick(output), source=f"tool:{call_id}"))
    session.append(PhaseEnd(name=phase.name, conclusion=phase.conclusion))


async def run_phases(
    store: SessionStore,
    strategy: str,
    compact: Callable[[Session], Awaitable[CompactionResult | None]],
    session_id: UUID | None = None,
) -> PhaseRun:
    session = store.create(session_id, invariants=DEFAULT_INVARIANTS)
    run = PhaseRun(strategy, session)
    meter = HeuristicMeter()
    for index, phase in enumerate(PHASES):
        loop = AgentLoop(
            session,
            _script(phase, index),
            _tools(),
            store=store,
            provider="scripted",
            model_name="claims-agent",
            system="You handle damage claims.",
            context_window=32000,
        )
        turn_start = len(session)
        await loop.run_turn(phase.prompt)
        _record_state(session, phase, turn_start)
        store.save(session)
        before = meter.measure(session).total_tokens
        result = await compact(session)
        run.boundaries.append(
            {
                "phase": phase.name,
                "tokens_before": before,
                "tokens_after": meter.measure(session).total_tokens,
                "compacted": result is not None,
            }
        )
    return run


async def compare_strategies(
    store: SessionStore, session_ids: Mapping[str, UUID] | None = None
) -> list[PhaseRun]:
    """The workflow run once per strategy (``session_ids``: the id of each run, by strategy)."""
    ids = dict(session_ids or {})
    checkpoint = CheckpointCompactService()
    summary = BasicCompactService(BasicConfig(context_window=32000))

    async def by_checkpoint(session: Session) -> CompactionResult | None:
        return await checkpoint.compact_if_needed(session, store=store)

    async def by_summary(session: Session) -> CompactionResult | None:
        return await summary.compact_now(session, store=store)

    return [
        await run_phases(store, "checkpoint", by_checkpoint, ids.get("checkpoint")),
        await run_phases(store, "summary", by_summary, ids.get("summary")),
    ]
