"""``compaction [--store URL] COMMAND ... [--json]``: parse, run one command, print its document.

Data on stdout, commentary on stderr (:data:`EPILOG`, printed by ``compaction --help``): stdout
holds the result alone (the one JSON document under ``--json``); headers, notes, hints, progress and
errors go to stderr. Exit status: 0 on success, 1 when the library reports an error (any
:class:`~compaction.errors.EventCompactionError`) or a command's check fails, 2 for a command line
that does not parse, 130 on Ctrl-C. Expected errors never print a traceback: one line on stderr, or
under ``--json`` the document ``{"error": {"type": ..., "message": ...}}`` on stdout.

To add a core command: write ``cmd_NAME.py`` exporting ``COMMAND`` and add it to :data:`COMMANDS`.
Other packages add theirs through the ``compaction.commands`` entry points (:mod:`.plugins`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import NoReturn

from compaction.cli import (
    cmd_audit,
    cmd_compact,
    cmd_config,
    cmd_copy,
    cmd_demo,
    cmd_export,
    cmd_import,
    cmd_serve,
    cmd_sessions,
    cmd_show,
)
from compaction.cli.command import Command, Context, Document, stderr_console
from compaction.cli.output import (
    report_crash,
    report_error,
    silence_stdout,
    stdout_console,
    write_json,
)
from compaction.cli.plugins import plugin_commands
from compaction.engine.settings import Settings, default_settings_path, load_settings
from compaction.errors import EventCompactionError, SpanTooSmallError, UsageError
from compaction.sessions.store import DEFAULT_URL, default_url
from compaction.summarizers.local import abandoned_servers

COMMANDS: tuple[Command, ...] = (
    cmd_audit.COMMAND,
    cmd_compact.COMMAND,
    cmd_config.COMMAND,
    cmd_copy.COMMAND,
    cmd_demo.COMMAND,
    cmd_export.COMMAND,
    cmd_import.COMMAND,
    cmd_serve.COMMAND,
    cmd_sessions.COMMAND,
    cmd_show.COMMAND,
)
"""The core's commands; :func:`all_commands` adds the plugins (``rebuild``, ``recover``, ...)."""


def all_commands() -> list[Command]:
    """The core's commands and every ``compaction.commands`` plugin, sorted by name."""
    plugins = plugin_commands(c.name for c in COMMANDS)
    return sorted([*COMMANDS, *plugins], key=lambda c: c.name)


FAILURE = 1
USAGE = 2
DECLINED = 3
INTERRUPTED = 130

EPILOG = """\
output:
  stdout holds the result and nothing else: with --json exactly one JSON document (also on
  failure: {"error": {"type": ..., "message": ...}}); without it the data itself (show's
  messages, audit --request's request, export --out -'s events) or the command's tables, so
  `> file` and `| jq` get only that. Headers, notes, hints, progress bars and error messages
  go to stderr.

exit status:
  0    success
  1    an error from the library (one line on stderr, or the error document), or a check
       that failed: audit with a failed check, demo with checks_passed false, copy with a
       session not verified, recover with an orphan not inert, compact leaving a session
       above its context window
  2    a command line that does not parse (UsageError), e.g. an unknown option or an empty
       SESSION
  3    compact declined a span too small to gain anything (SpanTooSmallError): nothing
       written, no summarizer asked
  130  interrupted (Ctrl-C)

docs/cli.md describes every command and its JSON document."""


class _Parser(argparse.ArgumentParser):
    """Raises :class:`UsageError` instead of exiting, so ``--json`` can report it as a document."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.format_usage())


def _add_common(parser: argparse.ArgumentParser, *, in_command: bool) -> None:
    # Inside a command the defaults are suppressed, so the options also work after COMMAND
    # without resetting what was given before it.
    default = argparse.SUPPRESS if in_command else None
    parser.add_argument(
        "--store",
        metavar="URL",
        default=default,
        help=f"sqlite:///PATH, postgresql://USER@HOST:PORT/DB, nats://HOST:PORT or memory:// "
        f"(default: $COMPACTION_STORE, else {DEFAULT_URL})",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=default,
        help="a compaction.toml: store, meter, pruner, engine and per-model policies "
        "(default: ./compaction.toml when present; docs/config.md)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS if in_command else False,
        help="print exactly one JSON document on stdout",
    )
    parser.add_argument(
        "--strict-types",
        action="store_true",
        default=argparse.SUPPRESS if in_command else False,
        help="refuse stored events of types no installed package defines (default: read them as "
        "opaque events; also $COMPACTION_STRICT_TYPES=1)",
    )


def build_parser(commands: Sequence[Command] | None = None) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="compaction",
        description="Event-sourced context compaction for LLM agent sessions.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_common(parser, in_command=False)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in all_commands() if commands is None else commands:
        sub = subparsers.add_parser(command.name, help=command.help, description=command.help)
        _add_common(sub, in_command=True)
        command.configure(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    err = stderr_console()
    commands = all_commands()
    try:
        args = build_parser(commands).parse_args(arguments)
    except UsageError as error:
        report_error(error, as_json=_wants_json(arguments), err=err)
        return USAGE
    except SystemExit as done:  # --help and --version
        return 0 if done.code is None else done.code if isinstance(done.code, int) else FAILURE
    command = next(c for c in commands if c.name == args.command)
    try:
        settings = _settings(args.config)
    except EventCompactionError as error:
        report_error(error, as_json=args.json, err=err)
        return FAILURE
    store_url = args.store or (settings.store_url if settings else None) or default_url()
    context = Context(
        store_url=store_url, json=args.json, err=err, read_only=command.read_only, settings=settings,
        strict_types=args.strict_types or None,
    )  # fmt: skip
    return _end(_execute(command, context, args))


def _end(code: int) -> int:
    """The exit status; after Ctrl-C with a local model server let go mid-reply, the process ends
    here at once (``os._exit``): collecting that server would wait for its reply to finish."""
    if code == INTERRUPTED and abandoned_servers():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _settings(path: str | None) -> Settings | None:
    """The ``--config`` file, else ``./compaction.toml`` when it exists, loaded and checked."""
    found = path or default_settings_path()
    return load_settings(found) if found is not None else None


def _execute(command: Command, context: Context, args: argparse.Namespace) -> int:
    try:
        document = command.run(context, args)
    except EventCompactionError as error:
        report_error(error, as_json=context.json, err=context.err)
        return _failure_status(error)
    except KeyboardInterrupt:
        if context.json:  # the contract holds on Ctrl-C too: one JSON document on stdout
            write_json({"error": {"type": "KeyboardInterrupt", "message": "interrupted"}})
        context.err.print("compaction: interrupted")
        return INTERRUPTED
    except Exception as error:
        if not context.json:
            raise
        report_crash(error, err=context.err)
        return FAILURE
    finally:
        context.close()
    return _output(command, context, document)


def _failure_status(error: EventCompactionError) -> int:
    """The exit status of an error: a usage error's, a declined span's, else a failure's."""
    if isinstance(error, UsageError):
        return USAGE
    return DECLINED if isinstance(error, SpanTooSmallError) else FAILURE


def _output(command: Command, context: Context, document: Document) -> int:
    """The document on stdout (JSON, or rendered for people, then the comment on stderr)."""
    try:
        if context.json:
            write_json(document)
        else:
            command.render(document, stdout_console())
            command.comment(document, context.err)
    except BrokenPipeError:  # the reader went away (``| head``): what it read is all it wanted
        silence_stdout()
    except KeyboardInterrupt:
        context.err.print("compaction: interrupted")
        return INTERRUPTED
    return command.exit_status(document)


def _wants_json(arguments: list[str]) -> bool:
    options = arguments[: arguments.index("--")] if "--" in arguments else arguments
    return "--json" in options


def _version() -> str:
    try:
        return version("event-compaction")
    except PackageNotFoundError:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
