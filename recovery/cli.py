"""``compaction recover [--repair] [--follow]``: orphaned ``compact/start`` scan, inertness proof,
repair (see ``docs/recovery.md``).

JSON: ``{orphans: [{session_id, compaction_id, start_seq, turn, stale, rule, reason, inert,
surface_hash, action, age_seconds, owner, end_seq, closer_seqs, evidence, warnings}], unreadable:
[{session_id, seq, notification_id, type, reason, action}], events_scanned, records_read, seconds,
polls, repaired, corrupt, passed}``. With ``--follow`` the command polls
until Ctrl-C, SIGTERM or ``--max-polls``, logs each orphan's changes on stderr, then prints the
latest report of every orphan it saw. Exit status 1 when an orphan is not inert (``passed: false``).
"""

from __future__ import annotations

import argparse
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.text import Text

from compaction.cli.command import Command, Context, Document
from compaction.cli.output import invocation, positive_int, table
from recovery import OrphanReport, Recovery, RecoveryConfig, recover


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--repair",
        action="store_true",
        help="close stale, inert orphans (compact/end{error: abandoned} + turn closers)",
    )
    parser.add_argument(
        "--follow", action="store_true", help="keep polling the store (until Ctrl-C or SIGTERM)"
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="--follow poll interval (default 5)",
    )
    parser.add_argument("--max-polls", type=positive_int, metavar="N", help="--follow: stop after N polls")
    parser.add_argument(
        "--no-pid-check",
        action="store_true",
        help="judge staleness by lease expiry and session/resume only (hosts sharing a name)",
    )


def run(context: Context, args: argparse.Namespace) -> Document:
    config = RecoveryConfig(
        repair=args.repair, check_pids=not args.no_pid_check, interval_seconds=args.interval
    )
    if not args.follow:
        return recover(context.store, config).to_json()
    recovery = Recovery(context.store, config)

    def announce(report: OrphanReport) -> None:
        context.err.print(Text(f"recover: {report.describe()}"))

    with _stop_on_sigterm() as stop:
        report = recovery.follow(polls=args.max_polls, stop=stop, on_report=announce)
    return report.to_json()


@contextmanager
def _stop_on_sigterm() -> Iterator[threading.Event]:
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        yield stop
    finally:
        signal.signal(signal.SIGTERM, previous)


def render(document: Document, console: Console) -> None:
    orphans = document["orphans"]
    unreadable = document.get("unreadable", [])
    summary = (
        f"scanned {document['events_scanned']} events ({document['records_read']} lock records) "
        f"in {document['seconds']:.3f}s; {len(orphans)} orphans, {document['repaired']} repaired, "
        f"{document['corrupt']} corrupt, {len(unreadable)} unreadable sessions"
    )
    for u in unreadable:
        console.print(
            Text(
                f"unreadable: session {u['session_id']} seq {u['seq']} ({u['type']}): {u['reason']}; "
                f"run `{invocation()} audit {u['session_id']}`",
                style="bold red",
            )
        )
    if not orphans:
        console.print(f"no orphaned compact/start records; {summary}")
        return
    columns = ("session", "compaction", "seq", "age s", "state", "inert", "surface hash", "action")
    rows = [
        (
            o["session_id"],
            o["compaction_id"],
            o["start_seq"],
            f"{o['age_seconds']:.0f}",
            "stale" if o["stale"] else "live",
            {True: "inert", False: "NOT INERT", None: "-"}[o["inert"]],
            o["surface_hash"] or "",
            o["action"],
        )
        for o in orphans
    ]
    console.print(table("orphaned compact/start records", columns, rows))
    for o in orphans:
        console.print(Text(f"{o['session_id']} {o['compaction_id']}: {o['reason']}"))
        for line in o["evidence"]:
            console.print(Text(f"  evidence: {line}", style="bold red" if not o["inert"] else ""))
        for line in o.get("warnings", []):
            console.print(Text(f"  warning: {line}", style="bold yellow"))
    console.print(summary)


COMMAND = Command(
    name="recover",
    read_only=True,  # a store that does not exist is refused, not created
    help="find orphaned compact/start records, prove them inert, and (--repair) close stale ones",
    configure=configure,
    run=run,
    render=render,
    exit_status=lambda document: 0 if document["passed"] else 1,
)
