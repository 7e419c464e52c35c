"""``compaction sessions``: one row per stored session.

JSON: ``{sessions: [{session_id, events, surface_nodes, surface_tokens, compactions}]}``;
``surface_tokens`` is priced by :class:`~compaction.meters.HeuristicMeter`, ``compactions`` counts
the completed ones (``compact/end`` without ``error``).
"""

from __future__ import annotations

import argparse

from rich.console import Console

from compaction.brackets import committed_count
from compaction.cli.command import Command, Context, Document
from compaction.cli.output import table
from compaction.meters import HeuristicMeter, Meter
from compaction.sessions.session import Session


def configure(parser: argparse.ArgumentParser) -> None:
    """No options beyond the common ones."""


def run(context: Context, args: argparse.Namespace) -> Document:
    store = context.store
    session_ids = store.session_ids()
    meter = HeuristicMeter()
    rows: list[Document] = []
    with context.progress("reading sessions", total=len(session_ids)) as advance:
        for session_id in session_ids:
            rows.append(session_row(store.get(session_id), meter))
            advance()
    return {"sessions": rows}


def session_row(session: Session, meter: Meter) -> Document:
    return {
        "session_id": str(session.id),
        "events": len(session),
        "surface_nodes": len(session.nodes),
        "surface_tokens": meter.measure(session).surface_tokens,
        "compactions": committed_count(session),
    }


def render(document: Document, console: Console) -> None:
    rows = document["sessions"]
    if not rows:
        console.print("no sessions in this store; try `compaction demo` or `compaction import`")
        return
    columns = ("session_id", "events", "surface_nodes", "surface_tokens", "compactions")
    console.print(table(f"{len(rows)} sessions", columns, ([r[c] for c in columns] for r in rows)))


COMMAND = Command(
    name="sessions",
    help="list the sessions in the store",
    configure=configure,
    run=run,
    render=render,
)
