"""Commands from other packages, found through the ``compaction.commands`` entry points.

A distribution adds a command to ``compaction`` by declaring, in its ``pyproject.toml``::

    [project.entry-points."compaction.commands"]
    recover = "recovery.cli:COMMAND"

where ``COMMAND`` is a :class:`~compaction.cli.command.Command` whose ``name`` is the entry point's
name. This is how the ``rebuild`` (:mod:`projections.cli`) and ``recover`` (:mod:`recovery.cli`)
commands reach the command line without :mod:`compaction.cli` importing either package
(:func:`compaction.plugins.load_plugins` reads the group). A plugin
that cannot be loaded, or that is not a ``Command``, still appears under its name: running it
reports what went wrong (no traceback), and every other command works as usual.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from importlib.metadata import EntryPoint

from rich.console import Console

from compaction.cli.command import Command, Context, Document
from compaction.errors import PluginError
from compaction.plugins import Plugin, load_plugins

GROUP = "compaction.commands"


def plugin_commands(core: Iterable[str], found: Iterable[EntryPoint] | None = None) -> list[Command]:
    """One command per entry point of :data:`GROUP`, sorted by name; broken ones report themselves.

    ``core`` names the built-in commands: a plugin may not replace one.
    """
    plugins = load_plugins(
        GROUP, Command, label="compaction.cli.Command", reserved=core, name_of=lambda c: c.name, found=found
    )
    return [p.value if p.value is not None else _broken(p) for p in plugins]


def _broken(plugin: Plugin[Command]) -> Command:
    message = plugin.describe("command")

    def configure(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    def run(context: Context, args: argparse.Namespace) -> Document:
        raise PluginError(message)

    def render(document: Document, console: Console) -> None:  # never reached: run raises
        return None

    return Command(plugin.name, f"(unavailable: {plugin.problem})", configure, run, render)
