"""``compaction [--store URL] copy --to URL (--session ID... | --all) [--batch N]``: copy sessions
from the ``--store`` store into another, verified and resumable.

Either store may be SQLite, PostgreSQL (``?partitions=K`` for a partitioned one) or memory. Each
session is written in atomic batches at the same seqs, then loaded back from the target and verified
by event count and surface hash. An interrupted copy (even SIGKILL) leaves a contiguous prefix per
session; running the same command again copies only what is missing (``status`` ``resumed`` or
``already-copied``). A target holding *different* events for a session is reported as ``conflict``
and left untouched; a session that fails to copy is reported as ``failed``. The exit status is 1
unless every session is verified.

A PostgreSQL target whose database does not exist is created first (``created_database: true``).

JSON: ``{sessions: [{session_id, events, copied, surface_hash, verified, status, detail}],
source, target, copied_events, verified[, created_database]}``.
"""

from __future__ import annotations

import argparse
from uuid import UUID

from rich.console import Console
from rich.text import Text

from compaction.cli.command import Command, Context, Document, resolve_session
from compaction.cli.output import plural, positive_int, table
from compaction.errors import AmbiguousSessionError, EventCompactionError, SessionNotFoundError
from compaction.sessions.copy import BATCH, CopyReport, copy_session
from compaction.sessions.partitioned import AnyStore, open_store, split_options
from compaction.sessions.store import SessionStore, create_postgres_database


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--to", required=True, metavar="URL", help="the target store URL")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--session", action="append", metavar="ID", help="a session id or prefix (repeatable)")
    which.add_argument("--all", action="store_true", help="every session of the source store")
    parser.add_argument(
        "--batch", type=positive_int, default=BATCH, metavar="N",
        help=f"events per atomic insert (default {BATCH})",
    )  # fmt: skip


def run(context: Context, args: argparse.Namespace) -> Document:
    with open_store(context.store_url, create=False) as source:
        created = create_postgres_database(split_options(args.to)[0])
        with open_store(args.to) as target:
            document = _copy(context, args, source, target)
    if created:
        document["created_database"] = True
    return document


def _copy(context: Context, args: argparse.Namespace, source: AnyStore, target: AnyStore) -> Document:
    ids = source.session_ids() if args.all else [_resolve(source, t) for t in args.session]
    reports: list[CopyReport] = []
    with context.progress("copying sessions", total=len(ids)) as advance:
        for number, session_id in enumerate(ids, start=1):
            report = _copy_one(source, target, session_id, args.batch)
            reports.append(report)
            advance()
            if not context.json:
                context.err.print(Text(_progress_line(number, len(ids), report)), soft_wrap=True)
    return {
        "source": source.location.display,
        "target": target.location.display,
        "sessions": [r.as_json() for r in reports],
        "copied_events": sum(r.copied for r in reports),
        "verified": all(r.verified for r in reports),
    }


def _copy_one(source: AnyStore, target: AnyStore, session_id: UUID, batch: int) -> CopyReport:
    try:
        return copy_session(source, target, session_id, batch=batch)
    except EventCompactionError as e:
        return CopyReport(session_id, 0, 0, "", False, "failed", str(e))


def _resolve(source: AnyStore, text: str) -> UUID:
    """A session id or unique prefix, across every partition of the source."""
    if isinstance(source, SessionStore):
        return resolve_session(source, text)
    found: list[UUID] = []
    for part in source.parts:
        try:
            found.append(resolve_session(part, text))
        except SessionNotFoundError:
            continue
    if not found:
        raise SessionNotFoundError(text)
    if len(found) > 1:
        raise AmbiguousSessionError(text, [str(sid) for sid in found])
    return found[0]


def _progress_line(number: int, total: int, report: CopyReport) -> str:
    verdict = "verified" if report.verified else f"NOT verified: {report.detail}"
    return (
        f"[{number}/{total}] {report.session_id}: {report.status}, {report.copied} of "
        f"{report.events} events written, {verdict}"
    )


HEADERS = ("session", "status", "events", "copied", "verified", "surface hash", "detail")


def render(document: Document, console: Console) -> None:
    rows = document["sessions"]
    good = sum(r["verified"] for r in rows)
    title = (
        f"{document['source']} -> {document['target']}: {plural(len(rows), 'session')}, {good} verified, "
        f"{document['copied_events']} events written"
    )
    console.print(table(title, HEADERS, (_cells(r) for r in rows)))


def _cells(row: Document) -> list[object]:
    return [
        row["session_id"], row["status"], row["events"], row["copied"], row["verified"],
        row["surface_hash"], row["detail"],
    ]  # fmt: skip


def _exit_status(document: Document) -> int:
    return 0 if document["verified"] else 1


COMMAND = Command(
    name="copy",
    help="copy sessions to another store, verified by surface hash; resumable",
    configure=configure,
    run=run,
    render=render,
    exit_status=_exit_status,
)
