"""``compaction demo``: the main job. A long, tool-heavy agent session runs through the reference loop
with automatic compaction before every step, on the store (SQLite by default); each compaction is
printed with the request tokens before and after; then every compaction is audited from the stored
log. A phase-structured workflow then runs with the checkpoint strategy next to the summary strategy.

JSON: ``{session_id, events, compactions, tokens_before, tokens_after, checks_passed, window,
max_request_tokens, compaction_log: [...], checks: [...], strategies: [...]}``. ``tokens_before`` is
what the request would weigh with no compaction; ``tokens_after`` what it weighs now. ``checks_passed``
is true when every audit check passed, the surface is balanced and provider-valid, the task statement
is still first, and no request ever exceeded the window. The exit status is 1 when it is false.
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

from compaction.audit.checks import audit_events
from compaction.basic import BasicCompactService
from compaction.brackets import committed_count
from compaction.cli.command import Command, Context, Document
from compaction.cli.demo import run_demo_session
from compaction.cli.demo.phases import compare_strategies
from compaction.cli.output import positive_int, table
from compaction.config import BasicConfig
from compaction.meters import HeuristicMeter, Meter
from compaction.sessions.events import Replace
from compaction.sessions.loop import StepContext
from compaction.sessions.render import pairing_problems
from compaction.sessions.session import Session, project

SUMMARY_KEYS = ("events", "compactions", "tokens_before", "tokens_after", "max_request_tokens", "window")


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
                    f"compaction {len(self.log)} before turn {context.turn} step {context.step}: "
                    f"{before} -> {after} tokens",
                    markup=False,
                )


def run(context: Context, args: argparse.Namespace) -> Document:
    store = context.store
    session = store.create()
    meter = HeuristicMeter()
    service = BasicCompactService(BasicConfig(context_window=args.window), meter=meter)
    watch = CompactionWatch(service, meter, None if context.json else context.err)
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
    document["strategies"] = [] if args.no_phases else _strategies(context)
    return document


def _strategies(context: Context) -> list[dict[str, Any]]:
    runs = asyncio.run(compare_strategies(context.store))
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


def render(document: Document, console: Console) -> None:
    title = f"demo session {document['session_id']}"
    console.print(table(title, SUMMARY_KEYS, [[document[k] for k in SUMMARY_KEYS]]))
    failed = [c for c in document["checks"] if not c["passed"]]
    verdict = "every invariant held" if not failed else f"{len(failed)} checks FAILED"
    console.print(f"{len(document['checks'])} checks: {verdict}", markup=False)
    for check in failed:
        console.print(f"  FAILED {check['name']}: {check['evidence']}", markup=False)
    for run in document["strategies"]:
        rows = [
            [b["phase"], b["tokens_before"], b["tokens_after"], b["compacted"]] for b in run["boundaries"]
        ]
        console.print(
            table(
                f"phase workflow, {run['strategy']} strategy",
                ("boundary", "tokens before", "tokens after", "compacted"),
                rows,
            )
        )
    console.print(
        f"stored on {document['store']}; audit it with: compaction audit {document['session_id'][:8]}",
        markup=False,
    )


COMMAND = Command(
    name="demo",
    help="run the built-in agent session with auto-compaction and check every invariant",
    configure=configure,
    run=run,
    render=render,
    exit_status=lambda document: 0 if document["checks_passed"] else 1,
)
