"""``compaction import FILE... [--format auto|claude-code|pi|openhands|openai|events]``: real
transcripts into sessions, one atomic save per session.

A session already in the store (importers derive stable ids from the transcript) is reported with
``status: "already_imported"`` and left untouched. Every file is checked to exist before anything is
imported; an unreadable transcript stops the command with a :class:`TranscriptError` naming the file
and line (sessions saved before it stay saved, and a re-run reports them as already imported).

``--format events`` (also auto-detected by its header) restores a native export
(:mod:`compaction.sessions.native`, written by ``compaction export``) exactly: same id, same seqs,
same surface hash. A file whose seqs are not contiguous or whose events break a rule is refused,
naming the line; a session already stored with different events is refused too (nothing of it is written).

JSON: ``{sessions: [{session_id, source, format, status, events, messages, tool_calls,
tool_results, synthesized_results, compactions, skipped, notes}]}``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.text import Text

from compaction.cli.command import Command, Context, Document
from compaction.cli.output import table
from compaction.errors import StoreError, TranscriptError
from compaction.sessions.events import ToolResult
from compaction.sessions.hashing import surface_hash
from compaction.sessions.importers import ImportedSession, import_path
from compaction.sessions.native import import_session, is_native
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore

FORMATS = ("auto", "claude-code", "pi", "openhands", "openai", "events")
COUNTS = ("events", "messages", "tool_calls", "tool_results", "synthesized_results", "compactions")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", type=Path, help="transcript files")
    parser.add_argument(
        "--format", choices=FORMATS, default="auto", help="transcript format (default: auto-detect)"
    )


def run(context: Context, args: argparse.Namespace) -> Document:
    paths: list[Path] = args.files
    for path in paths:
        if not path.is_file():
            raise TranscriptError(str(path), None, "no such file; expected a transcript file")
    store = context.store
    rows: list[Document] = []
    with context.progress("importing transcripts", total=len(paths)) as advance:
        for path in paths:
            if args.format == "events" or (args.format == "auto" and is_native(path)):
                rows.append(import_events(store, path))
            else:
                imported = import_path(path, args.format)
                rows.extend(save_imported(store, one) for one in imported)
            advance()
    return {"sessions": rows}


def save_imported(store: SessionStore, imported: ImportedSession) -> Document:
    """Save one imported session unless its id is already stored; its row either way."""
    session = imported.session
    status = "already_imported"
    if not store.exists(session.id):
        store.save(session)
        status = "imported"
    return {
        "session_id": str(session.id),
        "source": imported.source,
        "format": imported.format,
        "status": status,
        **{name: getattr(imported, name) for name in COUNTS},
        "skipped": list(imported.skipped),
        "notes": list(imported.notes),
    }


def import_events(store: SessionStore, path: Path) -> Document:
    """Restore one native export; its row (counts taken from the restored log)."""
    session = import_session(path)
    status = "imported"
    if store.exists(session.id):
        _check_same(store.get(session.id), session, path)
        status = "already_imported"
    else:
        store.save(session)
    return {
        "session_id": str(session.id), "source": str(path), "format": "events", "status": status,
        **_native_counts(session), "skipped": [], "notes": [],
    }  # fmt: skip


def _check_same(stored: Session, restored: Session, path: Path) -> None:
    if len(stored) == len(restored) and surface_hash(stored) == surface_hash(restored):
        return
    raise StoreError(
        f"{path}: session {restored.id} is already stored with different events (store: "
        f"{len(stored)} events, surface hash {surface_hash(stored)[:12]}; file: {len(restored)} "
        f"events, surface hash {surface_hash(restored)[:12]}); nothing was imported"
    )


def _native_counts(session: Session) -> dict[str, int]:
    counts = session.type_counts
    results = [e for e in session.events() if isinstance(e, ToolResult) and e.surface_op == "append"]
    messages = ("user/message", "assistant/message", "context/message", "steering/message")
    return {
        "events": len(session),
        "messages": sum(counts.get(kind, 0) for kind in messages),
        "tool_calls": counts.get("tool/call", 0),
        "tool_results": len(results),
        "synthesized_results": sum(r.synthesized for r in results),
        "compactions": counts.get("compact/start", 0),
    }


HEADERS = (
    "session", "source", "format", "status", "events", "messages", "calls", "results", "synth",
    "compactions", "skipped",
)  # fmt: skip


def render(document: Document, console: Console) -> None:
    rows = document["sessions"]
    fresh = sum(row["status"] == "imported" for row in rows)
    title = f"{len(rows)} sessions: {fresh} imported, {len(rows) - fresh} already imported"
    console.print(table(title, HEADERS, (_cells(row) for row in rows)))
    for row in rows:
        for note in row["notes"]:
            console.print(Text(f"{row['session_id'][:8]} note: {note}", style="dim"))


def _cells(row: Document) -> list[object]:
    head = [row["session_id"][:8], Path(row["source"]).name, row["format"], row["status"]]
    return [*head, *(row[name] for name in COUNTS), len(row["skipped"])]


COMMAND = Command(
    name="import",
    help="import agent transcripts (Claude Code, pi, OpenHands, OpenAI-style) as sessions",
    configure=configure,
    run=run,
    render=render,
)
