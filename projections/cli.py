"""``compaction rebuild [--projection surface|ledger|usage|NAME|all] [--resume | --follow]``: the
read models (see ``docs/projections.md``), the installed ``compaction.projections`` plugins' too.

Default: drop the selected views and their tracking records, then rebuild them from notification 1
(a progress bar on stderr when it is a terminal). ``--resume`` catches up from the tracking
records instead; ``--follow`` catches up and keeps applying new events until SIGTERM or SIGINT,
then finishes the batch under way, records its tracking and exits 0 (it never drops, so a restarted
follower resumes where it stopped). A store or views it cannot reach (a PostgreSQL restart, a
terminated connection) are waited out with backoff, and it resumes from the tracking records; it
exits 1 only after ``--reconnect-attempts`` failed attempts in a row (default 20), saying why.

JSON: ``{mode, store, views, projections: [{name, events, rows, position}]}``; ``events`` counts the
notifications this run applied to the view, ``rows`` the rows the view holds now.
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from compaction.cli.command import Command, Context, Document
from compaction.cli.output import positive_int, table
from compaction.engine.meters import meter_named
from compaction.sessions.polling import DEFAULT_POLL_INTERVAL
from projections import ProjectionReport, ProjectionRunner, Reconnect, resolve_names, stop_on_signals
from projections.runner import DEFAULT_BATCH_SIZE, projection_names


def positive_seconds(text: str) -> float:
    """An ``argparse`` type: a number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def configure(parser: argparse.ArgumentParser) -> None:
    names = projection_names()
    parser.add_argument(
        "--projection",
        action="append",
        choices=(*names, "all"),
        metavar="NAME",
        help=f"which view ({', '.join(names)} or all; repeatable; default all)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--resume",
        action="store_true",
        help="catch up from the tracking records instead of dropping and rebuilding",
    )
    mode.add_argument(
        "--follow",
        action="store_true",
        help="catch up, then apply new events until SIGTERM/SIGINT (never drops)",
    )
    parser.add_argument(
        "--poll",
        type=positive_seconds,
        default=DEFAULT_POLL_INTERVAL,
        metavar="SECONDS",
        help=f"--follow: seconds between looks for new events (default {DEFAULT_POLL_INTERVAL})",
    )
    parser.add_argument(
        "--reconnect-attempts",
        type=int,
        default=Reconnect.attempts,
        metavar="N",
        help="--follow: failed attempts in a row to reach the store or the views before giving "
        f"up (default {Reconnect.attempts}; 0 gives up at the first)",
    )
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=DEFAULT_BATCH_SIZE,
        metavar="N",
        help=f"notifications per transaction (default {DEFAULT_BATCH_SIZE})",
    )
    parser.add_argument(
        "--views",
        metavar="PATH",
        help="SQLite only: the views file (default: NAME.views.db next to the store file)",
    )
    parser.add_argument(
        "--meter",
        default="heuristic",
        metavar="NAME",
        help="the usage view's meter: heuristic, heuristic:N or tiktoken:ENCODING",
    )


def run(context: Context, args: argparse.Namespace) -> Document:
    names = resolve_names(args.projection or ["all"])
    meter = meter_named(args.meter)
    mode = "follow" if args.follow else "resume" if args.resume else "rebuild"
    store = context.store
    with ProjectionRunner(
        store,
        names,
        views_path=args.views,
        batch_size=args.batch_size,
        poll_interval=args.poll,
        meter=meter,
        reconnect=Reconnect(args.reconnect_attempts),
    ) as runner:
        if mode == "follow":
            reports = _follow(context, runner)
        else:
            total = (
                store.count_notifications(0, store.max_notification_id())
                if mode == "rebuild"
                else runner.behind()
            )
            label = f"{'rebuilding' if mode == 'rebuild' else 'catching up'} {', '.join(names)}"
            with _progress(context, label, total) as advance:
                reports = runner.rebuild(advance) if mode == "rebuild" else runner.catch_up(advance)
        views = runner.database.location
    return {
        "mode": mode,
        "store": store.location.display,
        "views": views,
        "projections": [r.to_json() for r in reports],
    }


def _follow(context: Context, runner: ProjectionRunner) -> list[ProjectionReport]:
    stop = threading.Event()
    with stop_on_signals(stop):
        if not context.json:
            context.err.print(
                f"following {context.store.location.display} into {runner.database.location}; "
                "stop with SIGTERM or Ctrl-C"
            )
        return runner.run_forever(stop)


@contextmanager
def _progress(context: Context, label: str, total: int) -> Iterator[Callable[[int], None]]:
    """A progress bar counted in notifications (stderr, only on a terminal)."""
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=context.err,
        transient=True,
        disable=not context.err.is_terminal,
    ) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)


def render(document: Document, console: Console) -> None:
    rows = document["projections"]
    columns = ("name", "events", "rows", "position")
    cells = ([r[c] for c in columns] for r in rows)
    console.print(table(f"views in {document['views']}", columns, cells))
    applied = max((r["events"] for r in rows), default=0)
    verb = {"rebuild": "rebuilt", "resume": "caught up", "follow": "followed"}[document["mode"]]
    console.print(f"{verb} {len(rows)} view(s): {applied} notifications applied")


COMMAND = Command(
    name="rebuild",
    read_only=True,  # a store that does not exist is refused, not created
    help="drop and rebuild the read models (surface, ledger, usage), or follow the log",
    configure=configure,
    run=run,
    render=render,
)
