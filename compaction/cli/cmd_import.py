"""``compaction import FILE... [--format auto|NAME|events]``: real transcripts into sessions, one
atomic save per session. The format names (and their aliases) are those of
:mod:`compaction.importers.registry`, third-party formats included.

A PATH that is a directory stands for every transcript file under it (``*.jsonl``, ``*.json``,
``*.traj``, recursively, in name order); a progress bar on stderr (only on a terminal) counts the
files. A session already in the store (importers derive stable ids from the transcript) is reported
with ``status: "already_imported"`` and left untouched, also when another import of the same file
saved it first while this one ran. A session with no events (a file holding only a tool result, a
one-line sidechain) is not saved: its row says ``status: "skipped"`` and ``reason``. Every path is
checked before anything is imported (a missing path, a FIFO or a device is refused, saying what it
is). A transcript that cannot be read is listed under ``failed`` with its :class:`TranscriptError`
(naming the file and line) and the other files are imported all the same; the exit status is then
1. Given a single file, its error is the command's error. A forced
``--format`` that turns the file into nothing is an error naming the format the file looks like.

``--format events`` (also auto-detected by its header) restores a native export
(:mod:`compaction.sessions.native`, written by ``compaction export``) exactly: same id, same seqs,
same surface hash. A file whose seqs are not contiguous or whose events break a rule is refused,
naming the line; a session already stored with different events is refused too (nothing of it is written).

A save whose events are stored but whose snapshot could not be written succeeds: the snapshot is
skipped, and ``warnings`` (in the JSON, and on stderr) says so; a save whose events were not stored
fails with a :class:`~compaction.errors.SaveError` saying so (exit 1).

JSON: ``{sessions: [{session_id, source, format, status, events, messages, tool_calls,
tool_results, synthesized_results, compactions, skipped, notes}], failed: [{source, error}]}``
(``reason`` too when skipped).
``tool_calls`` counts the calls the model made, ``tool_results`` the results the tools returned and
``synthesized_results`` the results made up for calls left unanswered, for every format alike.
"""

from __future__ import annotations

import argparse
import stat
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.text import Text

from compaction.cli.command import Command, Context, Document
from compaction.cli.output import plural, table
from compaction.errors import ConcurrencyError, StoreError, TranscriptError
from compaction.importers import ImportedSession, import_path, registry
from compaction.sessions.blocks import ToolCallBlock
from compaction.sessions.events import AssistantMessage, ToolResult
from compaction.sessions.hashing import surface_hash
from compaction.sessions.native import import_session, is_native
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore

NATIVE = "events"
"""The ``--format`` of a native export (:mod:`compaction.sessions.native`)."""
COUNTS = ("events", "messages", "tool_calls", "tool_results", "synthesized_results", "compactions")
SUFFIXES = (".jsonl", ".json", ".traj")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "files", nargs="+", metavar="PATH", type=Path,
        help="transcript files, or directories holding them (searched recursively)",
    )  # fmt: skip
    parser.add_argument(
        "--format", choices=format_choices(), default="auto",
        help=f"transcript format (default: auto-detect): {format_help()}, {NATIVE} (a native export)",
    )  # fmt: skip


def format_choices() -> tuple[str, ...]:
    """``auto``, every format of the registry and its aliases, and the native export."""
    return ("auto", *registry.names(), *registry.aliases(), NATIVE)


def format_help() -> str:
    """Each format of the registry as ``name (title; also alias, ...)``."""
    return ", ".join(
        f"{f.name} ({f.title}" + (f"; also {', '.join(f.aliases)}" if f.aliases else "") + ")"
        for f in registry.formats()
    )


def transcript_files(paths: list[Path]) -> list[Path]:
    """Every file to import: the files given, and the transcripts under each directory given.
    Anything else (a missing path, a FIFO, a device, a directory without transcripts) is refused
    before anything is imported, saying what it is."""
    files: list[Path] = []
    for path in paths:
        kind = _kind(path)
        if kind == "directory":
            found = sorted(p for p in path.rglob("*") if p.suffix in SUFFIXES and _kind(p) == "file")
            if not found:
                raise TranscriptError(
                    str(path), None,
                    f"is a directory with no transcript files ({', '.join(SUFFIXES)}) under it",
                )  # fmt: skip
            files.extend(found)
        elif kind != "file":
            raise TranscriptError(str(path), None, f"{kind}; expected a transcript file or a directory")
        else:
            files.append(path)
    return files


def _kind(path: Path) -> str:
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "no such file or directory"
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISFIFO(mode):
        return "is a FIFO (named pipe), not a regular file"
    if stat.S_ISSOCK(mode):
        return "is a socket, not a regular file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device, not a regular file"
    return "is not a regular file"


def run(context: Context, args: argparse.Namespace) -> Document:
    paths = transcript_files(args.files)
    store = context.store
    rows: list[Document] = []
    failed: list[Document] = []
    try:
        with context.progress("importing transcripts", total=len(paths)) as advance:
            for path in paths:
                try:
                    rows.extend(import_file(store, path, args.format))
                except TranscriptError as e:
                    if len(paths) == 1:
                        raise  # the one file asked for: its error is the command's
                    failed.append({"source": str(path), "error": str(e)})
                advance()
    finally:
        if not rows:  # nothing imported: a store this run created is not left behind empty
            context.discard_new_store()
    document: Document = {"sessions": rows, "failed": failed}
    if store.snapshot_warnings:
        document["warnings"] = list(store.snapshot_warnings)
    return document


def import_file(store: SessionStore, path: Path, fmt: str) -> list[Document]:
    """The rows of one file's sessions, saved; a :class:`TranscriptError` when it cannot be read."""
    if fmt == NATIVE or (fmt == "auto" and is_native(path)):
        return [import_events(store, path)]
    return [save_imported(store, one) for one in import_path(path, fmt)]


def save_imported(store: SessionStore, imported: ImportedSession) -> Document:
    """Save one imported session unless its id is already stored (or it has no events); its row
    either way."""
    session = imported.session
    reason: str | None = None
    if not len(session):
        status = "skipped"
        reason = _empty_reason(imported)
    elif store.exists(session.id) or not _save_first(store, session):
        status = "already_imported"
    else:
        status = "imported"
    row: Document = {
        "session_id": str(session.id),
        "source": imported.source,
        "format": imported.format,
        "status": status,
        **{name: getattr(imported, name) for name in COUNTS},
        "skipped": list(imported.skipped),
        "notes": list(imported.notes),
    }
    if reason is not None:
        row["reason"] = reason
    return row


def _save_first(store: SessionStore, session: Session) -> bool:
    """Save a new session; False when another import of the same file saved it first."""
    try:
        store.save(session)
    except ConcurrencyError:
        if store.exists(session.id):
            return False
        raise
    return True


def _empty_reason(imported: ImportedSession) -> str:
    why = "; ".join(imported.skipped[:3]) or "the input holds no conversation"
    more = f" (and {len(imported.skipped) - 3} more)" if len(imported.skipped) > 3 else ""
    return f"no events to import: {why}{more}"


def import_events(store: SessionStore, path: Path) -> Document:
    """Restore one native export; its row (counts taken from the restored log)."""
    session = import_session(path)
    status = "imported"
    if store.exists(session.id) or not _save_first(store, session):
        _check_same(store.get(session.id), session, path)
        status = "already_imported"
    return {
        "session_id": str(session.id), "source": str(path), "format": NATIVE, "status": status,
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
    """The counts an importer reports, taken from the log: calls the model made (tool-call blocks
    of appended assistant messages), results tools returned, results synthesized for the rest."""
    counts = session.type_counts
    calls = results = synthesized = 0
    for event in session.events():
        if event.surface_op != "append":
            continue
        if isinstance(event, AssistantMessage):
            calls += sum(isinstance(b, ToolCallBlock) for b in event.message.content)
        elif isinstance(event, ToolResult):
            synthesized += event.synthesized
            results += not event.synthesized
    messages = ("user/message", "assistant/message", "context/message", "steering/message")
    return {
        "events": len(session),
        "messages": sum(counts.get(kind, 0) for kind in messages),
        "tool_calls": calls,
        "tool_results": results,
        "synthesized_results": synthesized,
        "compactions": counts.get("compact/start", 0),
    }


HEADERS = (
    "session", "source", "format", "status", "events", "messages", "tool calls", "tool results",
    "synthesized results", "compactions", "skipped lines",
)  # fmt: skip
REASONS_SHOWN = 10
"""Skip reasons listed per session (the most frequent first); ``--json`` lists every line."""


def render(document: Document, console: Console) -> None:
    """The table of sessions, then for each session what was skipped, grouped by reason with
    counts (notes go to stderr: :func:`comment`)."""
    rows = document["sessions"]
    statuses = Counter(row["status"] for row in rows)
    title = (
        f"{plural(len(rows), 'session')}: {statuses['imported']} imported, "
        f"{statuses['already_imported']} already imported"
    )
    if statuses["skipped"]:
        title += f", {statuses['skipped']} skipped (no events)"
    failed = document.get("failed", [])
    if failed:
        title += f"; {plural(len(failed), 'file')} could not be read"
    if rows:
        console.print(table(title, HEADERS, (_cells(row) for row in rows)))
    else:
        console.print(title, markup=False)
    for failure in failed:
        console.print(Text(f"not imported: {failure['error']}", style="red"), soft_wrap=True)
    for row in rows:
        if row.get("reason"):
            console.print(Text(f"session {row['session_id']} skipped: {row['reason']}"), soft_wrap=True)
        if row["skipped"]:
            _print_skipped(row, console)


def _print_skipped(row: Document, console: Console) -> None:
    groups = skip_reasons(row["skipped"])
    console.print(
        Text(
            f"{len(row['skipped'])} input lines of session {row['session_id']} "
            f"({Path(row['source']).name}) not imported, by reason:"
        ),
        soft_wrap=True,
    )
    width = len(str(groups[0][1]))
    for reason, count, first in groups[:REASONS_SHOWN]:
        console.print(Text(f"  {count:>{width}}  {reason} (first: {first})"), soft_wrap=True)
    if len(groups) > REASONS_SHOWN:
        rest = sum(count for _, count, _ in groups[REASONS_SHOWN:])
        others = len(groups) - REASONS_SHOWN
        line = f"  {rest:>{width}}  lines for {others} other reasons (--json lists every line)"
        console.print(Text(line), soft_wrap=True)


def skip_reasons(skipped: list[str]) -> list[tuple[str, int, str]]:
    """``(reason, count, first place)`` for each distinct reason, the most frequent first. An entry
    reads ``PLACE: REASON`` (``line 12: progress line: not a conversation message``)."""
    counts: Counter[str] = Counter()
    first: dict[str, str] = {}
    for entry in skipped:
        place, separator, reason = entry.partition(": ")
        if not separator:
            place, reason = "?", entry
        counts[reason] += 1
        first.setdefault(reason, place)
    return [(reason, count, first[reason]) for reason, count in counts.most_common()]


def comment(document: Document, err: Console) -> None:
    """The importers' notes and the store's warnings, on stderr."""
    for warning in document.get("warnings", ()):
        err.print(Text(f"warning: {warning}", style="yellow"), soft_wrap=True)
    for row in document["sessions"]:
        for note in row["notes"]:
            err.print(Text(f"session {row['session_id']} note: {note}", style="dim"), soft_wrap=True)


def _cells(row: Document) -> list[object]:
    head = [row["session_id"], Path(row["source"]).name, row["format"], row["status"]]
    return [*head, *(row[name] for name in COUNTS), len(row["skipped"])]


def exit_status(document: Document) -> int:
    """1 when a file could not be read (the others were imported)."""
    return 1 if document.get("failed") else 0


COMMAND = Command(
    name="import",
    help="import agent transcripts (every format --format names) and native exports as sessions",
    configure=configure,
    run=run,
    render=render,
    comment=comment,
    exit_status=exit_status,
)
