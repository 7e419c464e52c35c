"""``compaction demo``: the main job. A long, tool-heavy agent session runs through the reference loop
with automatic compaction before every step, on the store (SQLite by default); each compaction is
printed with the request tokens before and after; then every compaction is audited from the stored
log. A phase-structured workflow then runs with the checkpoint strategy next to the summary strategy.

JSON: ``{session_id, events, compactions, tokens_before, tokens_after, checks_passed, window,
max_request_tokens, compaction_log: [...], checks: [...], strategies: [...], kept}``. The sessions'
ids follow from the settings (``--seed``, ``--turns``, ``--steps``, ``--window``): when a store
already holds them from an earlier run, the demo runs in memory and keeps those (``kept: true``), so
running it again does not add sessions. ``tokens_before`` is
what the request would weigh with no compaction; ``tokens_after`` what it weighs now. ``checks_passed``
is true when every audit check passed, the surface is balanced and provider-valid, the task statement
is still first, and no request ever exceeded the window. The exit status is 1 when it is false.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
from dataclasses import dataclass, field
from typing import Any
from uuid import NAMESPACE_URL, UUID, uuid5

from rich.console import Console

from compaction.audit.checks import audit_events
from compaction.cli.command import Command, Context, Document
from compaction.cli.demo import run_demo_session
from compaction.cli.demo.phases import compare_strategies
from compaction.cli.output import invocation, positive_int, table
from compaction.engine.brackets import committed_count
from compaction.engine.meters import HeuristicMeter, Meter
from compaction.service import BasicCompactService
from compaction.sessions.events import Replace
from compaction.sessions.invariants import DEFAULT_INVARIANTS
from compaction.sessions.loop import StepContext
from compaction.sessions.render import pairing_problems
from compaction.sessions.session import Session, project
from compaction.sessions.store import SessionStore, default_url
from compaction.vocabulary.config import BasicConfig


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--turns", type=positive_int, default=2, metavar="N", help="user turns (default: 2)")
    parser.add_argument(
        "--steps", type=positive_int, default=40, metavar="N", help="steps per turn (default: 40)"
    )
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="scenario seed (default: 0)")
    parser.add_argument(
        "--window", type=positive_int, default=16000, metavar="N", help="context window (default: 16000)"
    )
    parser.add_argument("--no-phases", action="store_true", help="skip the phase-workflow comparison")


@dataclass
class CompactionWatch:
    """Wraps the automatic pre-step hook: records each compaction and the largest request."""

    service: BasicCompactService
    meter: Meter
    console: Console | None
    log: list[dict[str, Any]] = field(default_factory=list)
    max_request: int = 0

    async def pre_step(self, context: StepContext) -> None:
        session = context.session
        before = self.meter.measure(session).total_tokens
        done = committed_count(session)
        await self.service.pre_step(context)
        after = self.meter.measure(session).total_tokens
        self.max_request = max(self.max_request, after)
        if committed_count(session) > done:
            entry = {
                "turn": context.turn,
                "step": context.step,
                "tokens_before": before,
                "tokens_after": after,
            }
            self.log.append(entry)
            if self.console is not None:
                self.console.print(
                    f"compaction {len(self.log)}, before turn {context.turn} step {context.step}: "
                    f"the request went from {before} to {after} tokens",
                    markup=False,
                )


def run(context: Context, args: argparse.Namespace) -> Document:
    ids = demo_session_ids(args)
    wanted = [ids["demo"]] if args.no_phases else list(ids.values())
    target = context.store
    kept = any(target.exists(session_id) for session_id in wanted)
    # Run again with the same settings, the demo keeps the sessions an earlier run stored (the
    # same ids) and runs in memory, so `make demo` does not add three sessions every time.
    store = SessionStore.open("memory://") if kept else target
    try:
        document = _run_demo(store, args, ids, quiet=context.json, err=context.err)
    finally:
        if kept:
            store.close()
    document["store"] = target.location.display
    document["kept"] = kept
    return document


def demo_session_ids(args: argparse.Namespace) -> dict[str, UUID]:
    """The demo's session ids: the same for the same settings, so a second run finds the first's."""
    settings = f"compaction-demo:seed={args.seed}:turns={args.turns}:steps={args.steps}:window={args.window}"
    return {name: uuid5(NAMESPACE_URL, f"{settings}:{name}") for name in ("demo", "checkpoint", "summary")}


def _run_demo(
    store: SessionStore, args: argparse.Namespace, ids: dict[str, UUID], *, quiet: bool, err: Console
) -> Document:
    session = store.create(ids["demo"], invariants=DEFAULT_INVARIANTS)
    meter = HeuristicMeter()
    service = BasicCompactService(BasicConfig(context_window=args.window), meter=meter)
    watch = CompactionWatch(service, meter, None if quiet else err)
    asyncio.run(
        run_demo_session(
            session,
            store=store,
            turns=args.turns,
            steps_per_turn=args.steps,
            seed=args.seed,
            pre_step=[watch.pre_step],
            context_window=args.window,
        )
    )
    store.save(session)
    document = demo_document(session, store.location.display, meter, watch, args.window)
    document["turns"], document["steps_per_turn"] = args.turns, args.steps
    document["strategies"] = [] if args.no_phases else _strategies(store, ids)
    return document


def _strategies(store: SessionStore, ids: dict[str, UUID]) -> list[dict[str, Any]]:
    runs = asyncio.run(compare_strategies(store, ids))
    return [
        {"strategy": r.strategy, "session_id": str(r.session.id), "boundaries": r.boundaries} for r in runs
    ]


def uncompacted_tokens(session: Session, meter: Meter) -> int:
    """What the request would weigh had nothing been compacted: header + every appended message."""
    total = meter.header(session.latest_header())
    for event in session.events():
        if event.SURFACE and not isinstance(event.surface_op, Replace) and project(event) is not None:
            total += meter.event(event)
    return total


def demo_document(
    session: Session, store: str, meter: Meter, watch: CompactionWatch, window: int
) -> Document:
    audits, log_checks = audit_events(list(session.events()))
    checks = [c.as_json() for c in log_checks] + [
        {**c.as_json(), "compaction_id": a.compaction_id} for a in audits for c in a.checks
    ]
    problems = pairing_problems(session.derive_messages())
    first_kept = session.first_user_seq is not None and session.nodes[0] == session.first_user_seq
    within = watch.max_request < window
    checks += [
        {"name": "surface-balanced", "passed": session.surface.is_balanced(), "evidence": ""},
        {"name": "provider-valid", "passed": not problems, "evidence": "; ".join(problems[:5])},
        {
            "name": "task-statement-first",
            "passed": first_kept,
            "evidence": f"surface head {session.nodes[:1]}",
        },
        {
            "name": "within-window",
            "passed": within,
            "evidence": f"largest request {watch.max_request} tokens, window {window}",
        },
    ]
    return {
        "session_id": str(session.id),
        "store": store,
        "events": len(session),
        "surface_nodes": len(session.nodes),
        "compactions": committed_count(session),
        "tokens_before": uncompacted_tokens(session, meter),
        "tokens_after": meter.measure(session).total_tokens,
        "max_request_tokens": watch.max_request,
        "window": window,
        "compaction_log": watch.log,
        "checks": checks,
        "checks_passed": all(c["passed"] for c in checks),
    }


MEASURES = (
    ("events", "events in the stored log (compaction appends records; it never deletes an event)"),
    ("compactions", "compactions the library made on its own, each right before a model step"),
    ("tokens_before", "the request the model would get now had nothing been compacted"),
    ("tokens_after", "the request the model gets now"),
    ("max_request_tokens", "the largest request the agent sent (it must stay under the window)"),
    ("window", "the context window the session ran under (--window)"),
)
STRATEGIES = {
    "checkpoint": "rebuilds the context from the typed state the harness recorded (no model)",
    "summary": "replaces the finished phase with a summary (the template summarizer, offline)",
}


def render(document: Document, console: Console) -> None:
    """On stdout, the results, each table saying what it shows (the closing lines go to stderr)."""
    console.print(
        table(
            f"demo session {document['session_id']}: a scripted coding agent fixing bugs, "
            f"{_turns(document)}, compacted automatically whenever a request neared the window",
            ("measure", "value", "what it means"),
            [[name.replace("_", " "), document[name], meaning] for name, meaning in MEASURES],
        )
    )
    failed = [c for c in document["checks"] if not c["passed"]]
    verdict = "every invariant held" if not failed else f"{len(failed)} checks FAILED"
    console.print(
        f"{len(document['checks'])} checks: {verdict} (each compaction re-audited from the stored "
        "log; tool calls and results paired; the task statement still first; no request over the "
        "window)",
        markup=False,
    )
    for check in failed:
        console.print(f"  FAILED {check['name']}: {check['evidence']}", markup=False)
    if document["strategies"]:
        console.print()
        console.print(
            "Phase workflow: a two-phase damage-claim task (investigate, then compute the credit), "
            "run twice, each run compacted at every phase boundary by another strategy. 'tokens "
            "before' and 'tokens after' are the request right before and right after that "
            "compaction; 'compacted' says whether the strategy compacted there.",
            markup=False,
        )
    for run in document["strategies"]:
        rows = [
            [b["phase"], b["tokens_before"], b["tokens_after"], b["compacted"]] for b in run["boundaries"]
        ]
        console.print()
        console.print(f"{run['strategy']} strategy: {STRATEGIES.get(run['strategy'], '')}", markup=False)
        console.print(
            table(
                f"session {run['session_id']}",
                ("phase ended", "tokens before", "tokens after", "compacted"),
                rows,
            )
        )


def _turns(document: Document) -> str:
    turns, steps = document.get("turns"), document.get("steps_per_turn")
    if turns is None or steps is None:
        return f"{document['events']} events"
    return f"{turns} user turn{'s' if turns != 1 else ''} of {steps} model steps"


def comment(document: Document, err: Console) -> None:
    """On stderr, what happened to the sessions and what to run next (true for this store)."""
    stored = [(document["session_id"], "the demo session")] + [
        (run["session_id"], f"the phase workflow, {run['strategy']} strategy")
        for run in document["strategies"]
    ]
    count = f"{len(stored)} session{'s' if len(stored) != 1 else ''}"
    store = document["store"]
    run_again = invocation()
    if store.startswith("memory:"):
        err.print(
            f"The demo stored {count} in {store}, a store that lives only while the command runs: "
            "they are gone now. To keep them and look at them afterwards, give a persistent store:\n"
            f"  {run_again} --store sqlite:///demo.db demo\n"
            f"  {run_again} --store sqlite:///demo.db audit --all",
            markup=False,
            soft_wrap=True,
        )
        return
    prefix = run_again if store == default_url() else f"{run_again} --store {shlex.quote(store)}"
    lines = [f"The demo stored {count} in {store}:"]
    if document.get("kept"):
        lines = [
            f"The demo's {count} for these settings were already in {store}, stored by an earlier "
            "run: kept them and stored nothing new (another --seed makes new ones):"
        ]
    lines += [f"  {session_id}  {what}" for session_id, what in stored]
    lines += [
        "Next (each line runs as printed, from this folder):",
        f"  {prefix} audit {document['session_id']}   # re-check every compaction from the log",
        f"  {prefix} show {document['session_id']}    # what the model sees now",
        f"  {prefix} sessions   # every stored session",
    ]
    err.print("\n".join(lines), markup=False, soft_wrap=True)


COMMAND = Command(
    name="demo",
    help="run the built-in agent session with auto-compaction and check every invariant",
    configure=configure,
    run=run,
    render=render,
    comment=comment,
    exit_status=lambda document: 0 if document["checks_passed"] else 1,
)
