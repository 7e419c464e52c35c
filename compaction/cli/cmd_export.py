"""``compaction export SESSION [--out FILE]``: one session in the native event format (JSONL).

The file is a header line (format, version, session id, library version, event count, surface
hash) then one event per line (see ``docs/formats.md``); ``compaction import --format events FILE``
restores it exactly. The file is written next to its final name and renamed into place, so an
interrupted export never leaves a truncated file under that name. ``--out -`` writes to stdout
(not with ``--json``, whose stdout is the JSON document). Default: ``SESSION_ID.events.jsonl`` in
the current directory.

JSON: ``{session_id, events, surface_hash, path}``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rich.console import Console
from rich.text import Text

from compaction.cli.command import Command, Context, Document
from compaction.errors import ConfigurationError, UsageError
from compaction.sessions.hashing import surface_hash
from compaction.sessions.native import export_lines, export_session
from compaction.sessions.session import Session

STDOUT = "-"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", metavar="SESSION", help="a session id or a unique prefix of one")
    parser.add_argument(
        "--out",
        metavar="FILE",
        help="where to write (default: SESSION_ID.events.jsonl here; '-' for stdout)",
    )


def run(context: Context, args: argparse.Namespace) -> Document:
    if args.out == STDOUT and context.json:
        raise UsageError("--out - writes the export to stdout; it cannot be combined with --json")
    session_id = context.resolve_session(args.session)
    session = context.store.get(session_id)
    path = STDOUT if args.out == STDOUT else str(_write(session, Path(args.out or _default(session))))
    if path == STDOUT:
        _stream(session)
    return {
        "session_id": str(session_id),
        "events": len(session),
        "surface_hash": surface_hash(session),
        "path": path,
    }


def _stream(session: Session) -> None:
    try:
        for line in export_lines(session):
            sys.stdout.write(line + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # the reader closed the pipe (``| head``): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _default(session: Session) -> str:
    return f"{session.id}.events.jsonl"


def _write(session: Session, path: Path) -> Path:
    partial = path.with_name(f".{path.name}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        export_session(session, partial)
        os.replace(partial, path)
    except OSError as e:
        partial.unlink(missing_ok=True)
        raise ConfigurationError(
            f"--out {path}: expected a writable file path for the export of session "
            f"{session.id}; writing failed: {e}"
        ) from e
    return path


def render(document: Document, console: Console) -> None:
    if document["path"] == STDOUT:
        return  # stdout holds the export itself
    console.print(
        Text(
            f"exported session {document['session_id']}: {document['events']} events to "
            f"{document['path']} (surface hash {document['surface_hash'][:16]})"
        )
    )


COMMAND = Command(
    name="export",
    read_only=True,
    help="write a session in the native event format (JSONL)",
    configure=configure,
    run=run,
    render=render,
)
