"""Commands from other packages, found through the ``compaction.commands`` entry points.

A distribution adds a command to ``compaction`` by declaring, in its ``pyproject.toml``::

    [project.entry-points."compaction.commands"]
    recover = "recovery.cli:COMMAND"

where ``COMMAND`` is a :class:`~compaction.cli.command.Command` whose ``name`` is the entry point's
name. This is how the ``rebuild`` (:mod:`projections.cli`) and ``recover`` (:mod:`recovery.cli`)
commands reach the command line without :mod:`compaction.cli` importing either package. A plugin
that cannot be loaded, or that is not a ``Command``, still appears under its name: running it
reports what went wrong (no traceback), and every other command works as usual.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from importlib.metadata import EntryPoint, entry_points

from rich.console import Console

from compaction.cli.command import Command, Context, Document
from compaction.errors import PluginError

GROUP = "compaction.commands"


def plugin_commands(core: Iterable[str], found: Iterable[EntryPoint] | None = None) -> list[Command]:
    """One command per entry point of :data:`GROUP`, sorted by name; broken ones report themselves.

    ``core`` names the built-in commands: a plugin may not replace one.
    """
    taken = set(core)
    commands: dict[str, Command] = {}
    for point in sorted(entry_points(group=GROUP) if found is None else found, key=lambda p: p.name):
        if point.name in taken or point.name in commands:
            continue  # the first one wins; a clash is not worth refusing every command over
        commands[point.name] = _load(point)
    return list(commands.values())


def _load(point: EntryPoint) -> Command:
    try:
        command = point.load()
    except Exception as error:  # any import failure of a third-party module
        return _broken(point, f"cannot be loaded: {type(error).__name__}: {error}")
    if not isinstance(command, Command):
        return _broken(point, f"expected a compaction.cli.Command, found {type(command).__name__}")
    if command.name != point.name:
        return _broken(point, f"the entry point is named {point.name!r} but its Command is {command.name!r}")
    return command


def _broken(point: EntryPoint, reason: str) -> Command:
    message = f"plugin command {point.name!r} ({point.value}, group {GROUP}) {reason}"

    def configure(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    def run(context: Context, args: argparse.Namespace) -> Document:
        raise PluginError(message)

    def render(document: Document, console: Console) -> None:  # never reached: run raises
        return None

    return Command(point.name, f"(unavailable: {reason})", configure, run, render)
