"""``compaction demo``: the main job on a built-in example: a tool-heavy agent session run through
the reference loop and saved on the store, then checked.

JSON: ``{session_id, events, compactions, tokens_before, tokens_after, checks_passed, ...}``.
``checks_passed`` is true when the surface is tool-pairing balanced and the derived history has no
provider pairing problems; the exit status is 1 when it is false.
"""

from __future__ import annotations

import argparse
import asyncio

from rich.console import Console

from compaction.cli.cmd_sessions import completed_compactions
from compaction.cli.command import Command, Context, Document
from compaction.cli.output import positive_int, table
from compaction.meters import HeuristicMeter
from sessions.render import pairing_problems
from sessions.scripted import run_demo_session
from sessions.session import Session

SUMMARY_KEYS = (
    "events",
    "surface_nodes",
    "compactions",
    "tokens_before",
    "tokens_after",
    "checks_passed",
)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--turns", type=positive_int, default=2, metavar="N", help="user turns (default: 2)"
    )
    parser.add_argument(
        "--steps", type=positive_int, default=30, metavar="N", help="steps per turn (default: 30)"
    )
    parser.add_argument(
        "--seed", type=int, default=0, metavar="N", help="scenario seed (default: 0)"
    )


def run(context: Context, args: argparse.Namespace) -> Document:
    store = context.store
    session = store.create()
    asyncio.run(
        run_demo_session(
            session, store=store, turns=args.turns, steps_per_turn=args.steps, seed=args.seed
        )
    )
    store.save(session)
    return demo_document(session, context.store.location.display)


def demo_document(session: Session, store: str) -> Document:
    tokens = HeuristicMeter().measure(session).surface_tokens
    balanced = session.surface.is_balanced()
    problems = pairing_problems(session.derive_messages())
    return {
        "session_id": str(session.id),
        "store": store,
        "events": len(session),
        "surface_nodes": len(session.nodes),
        "compactions": completed_compactions(session),
        "tokens_before": tokens,
        "tokens_after": tokens,
        "balanced": balanced,
        "pairing_problems": problems,
        "checks_passed": balanced and not problems,
    }


def render(document: Document, console: Console) -> None:
    title = f"demo session {document['session_id']}"
    console.print(table(title, SUMMARY_KEYS, [[document[k] for k in SUMMARY_KEYS]]))
    for problem in document["pairing_problems"]:
        console.print(f"pairing problem: {problem}", markup=False)
    console.print(
        f"stored on {document['store']}; see it with: compaction show {document['session_id'][:8]}",
        markup=False,
    )


COMMAND = Command(
    name="demo",
    help="run the built-in example agent session and check it",
    configure=configure,
    run=run,
    render=render,
    exit_status=lambda document: 0 if document["checks_passed"] else 1,
)
