"""``compaction export SESSION [--out FILE]``: one session in the native event format (JSONL).

The file is a header line (format, version, session id, library version, event count, surface
hash) then one event per line (see ``docs/formats.md``); ``compaction import --format events FILE``
restores it exactly. The session is read from the store window by window (memory holds one
window, whatever the session's length) and written as it is read, into a partial file next to its
final name that is renamed into place once complete: an export that fails mid-way (the disk, the
store) removes the partial file, so no truncated file is ever left, under either name. ``--out -``
writes to stdout (not with ``--json``, whose stdout is the JSON document); there a failure mid-way
ends the command with its error and exit code after the lines already written. Default:
``SESSION_ID.events.jsonl`` in the current directory.

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
from compaction.sessions.native import StoredExport

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
    export = StoredExport.of(context.store, session_id)
    path = STDOUT if args.out == STDOUT else str(_write(export, Path(args.out or _default(export))))
    if path == STDOUT:
        _stream(export)
    return {
        "session_id": str(session_id),
        "events": export.events,
        "surface_hash": export.surface_hash,
        "path": path,
    }


def _stream(export: StoredExport) -> None:
    try:
        export.write(sys.stdout)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader closed the pipe (``| head``): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _default(export: StoredExport) -> str:
    return f"{export.session_id}.events.jsonl"


def _write(export: StoredExport, path: Path) -> Path:
    """Stream the export into a partial file beside ``path``, renamed into place once complete;
    any failure (the disk, the store mid-way) removes the partial file and is raised."""
    partial = path.with_name(f".{path.name}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with partial.open("w", encoding="utf-8") as out:
            export.write(out)
        os.replace(partial, path)
    except OSError as e:
        partial.unlink(missing_ok=True)
        raise ConfigurationError(
            f"--out {path}: expected a writable file path for the export of session "
            f"{export.session_id}; writing failed: {e}"
        ) from e
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
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
