"""The ``compaction`` command line: the one composition root allowed to import every layer.

``compaction [--store URL] COMMAND ... [--json]``. Each command is one module (``cmd_*.py``) that
exports a :class:`~compaction.cli.command.Command`; :mod:`compaction.cli.main` lists them in its
command table. See ``docs/cli.md`` for the contract every command keeps.
"""

from compaction.cli.command import Command, Context, Document
from compaction.cli.errors import AmbiguousSessionError, UsageError
from compaction.cli.main import COMMANDS, main

__all__ = [
    "COMMANDS",
    "AmbiguousSessionError",
    "Command",
    "Context",
    "Document",
    "UsageError",
    "main",
]
