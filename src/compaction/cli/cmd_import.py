"""``compaction import FILE... [--format auto|claude-code|pi|openhands|openai|events]``: real
transcripts into sessions, one atomic save per session.

A session already in the store (importers derive stable ids from the transcript) is reported with
``status: "already_imported"`` and left untouched. Every file is checked to exist before anything is
imported; an unreadable transcript stops the command with a :class:`TranscriptError` naming the file
and line (sessions saved before it stay saved, and a re-run reports them as already imported).

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
from sessions.errors import ConfigurationError, TranscriptError
from sessions.importers import ImportedSession, import_path
from sessions.store import SessionStore

FORMATS = ("auto", "claude-code", "pi", "openhands", "openai", "events")
COUNTS = ("events", "messages", "tool_calls", "tool_results", "synthesized_results", "compactions")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", type=Path, help="transcript files")
    parser.add_argument(
        "--format", choices=FORMATS, default="auto", help="transcript format (default: auto-detect)"
    )


def run(context: Context, args: argparse.Namespace) -> Document:
    if args.format == "events":
        raise ConfigurationError(
            "--format events (the native event export) is not supported yet; expected one of "
            "auto, claude-code, pi, openhands, openai"
        )
    paths: list[Path] = args.files
    for path in paths:
        if not path.is_file():
            raise TranscriptError(str(path), None, "no such file; expected a transcript file")
    store = context.store
    rows: list[Document] = []
    with context.progress("importing transcripts", total=len(paths)) as advance:
        for path in paths:
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
