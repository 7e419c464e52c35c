"""``compaction sessions``: one row per stored session.

JSON: ``{sessions: [{session_id, events, surface_nodes, surface_tokens, tokens, compactions}]}``;
``tokens`` is the request total (:meth:`HeuristicMeter.measure <compaction.engine.meters.Meter.measure>`,
calibrated on the session's provider usage when it has some): the figure ``compact`` reports as
``tokens_before``/``tokens_after`` and ``show`` prints. ``surface_tokens`` is the messages alone at
the heuristic's own price, uncalibrated. ``compactions`` counts the completed ones (``compact/end``
without ``error``). A session that does not load is listed all the same, with its stored length,
null figures and ``unreadable``: the reason (the key is absent from readable rows).
"""

from __future__ import annotations

import argparse
from uuid import UUID

from rich.console import Console
from rich.text import Text

from compaction.cli.command import Command, Context, Document
from compaction.cli.output import invocation, plural, table
from compaction.engine.brackets import committed_count
from compaction.engine.meters import HeuristicMeter, Meter
from compaction.errors import EventCompactionError
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore


def configure(parser: argparse.ArgumentParser) -> None:
    """No options beyond the common ones."""


def run(context: Context, args: argparse.Namespace) -> Document:
    store = context.store
    session_ids = store.all_session_ids()
    meter = HeuristicMeter()
    rows: list[Document] = []
    with context.progress("reading sessions", total=len(session_ids)) as advance:
        for session_id in session_ids:
            rows.append(_listed(store, session_id, meter))
            advance()
    return {"sessions": rows}


def _listed(store: SessionStore, session_id: UUID, meter: Meter) -> Document:
    """The session's row; a session that does not load (a missing, undecodable or out-of-place
    row, an unknown type) is listed too, with its stored length and ``unreadable``: the reason."""
    try:
        return session_row(store.get(session_id), meter)
    except EventCompactionError as e:
        return {
            "session_id": str(session_id),
            "events": store.stream_length(session_id),
            "surface_nodes": None,
            "surface_tokens": None,
            "tokens": None,
            "compactions": None,
            "unreadable": str(e),
        }


def session_row(session: Session, meter: Meter) -> Document:
    reading = meter.measure(session)
    return {
        "session_id": str(session.id),
        "events": len(session),
        "surface_nodes": len(session.nodes),
        "surface_tokens": reading.surface_tokens,
        "tokens": reading.total_tokens,
        "compactions": committed_count(session),
    }


def render(document: Document, console: Console) -> None:
    rows = document["sessions"]
    if not rows:  # nothing on stdout; the hint goes to stderr (comment)
        return
    columns = ("session_id", "events", "surface_nodes", "tokens", "compactions")
    shown = ([("-" if r[c] is None else r[c]) for c in columns] for r in rows)
    headers = [c.replace("_", " ") for c in columns]  # words wrap, so the table fits 80 columns
    console.print(table(plural(len(rows), "session"), headers, shown))
    for row in rows:
        if row.get("unreadable"):
            console.print(Text(f"unreadable: {row['session_id']}: {row['unreadable']}", style="red"))


def comment(document: Document, err: Console) -> None:
    if not document["sessions"]:
        run_again = invocation()
        err.print(
            f"no sessions in this store; try `{run_again} demo` or `{run_again} import PATH`", markup=False
        )


COMMAND = Command(
    name="sessions",
    read_only=True,
    help="list the sessions in the store",
    configure=configure,
    run=run,
    render=render,
    comment=comment,
)
