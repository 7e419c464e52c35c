"""The ``compaction`` command line: the composition root of the ``compaction`` package.

``compaction [--store URL] COMMAND ... [--json]``; the entry point is
:func:`compaction.cli.main.main`. Each core command is one module (``cmd_*.py``) exporting a
:class:`Command`, listed in the command table :data:`compaction.cli.main.COMMANDS`; the commands of
other packages (``rebuild`` from ``projections/cli.py``, ``recover`` from ``recovery/cli.py``) come
through the ``compaction.commands`` entry points (:mod:`compaction.cli.plugins`), so this package
imports neither. See ``docs/cli.md`` for the contract every command keeps.
"""

from compaction.cli.command import Command, Context, Document
from compaction.errors import AmbiguousSessionError, UsageError

__all__ = ["AmbiguousSessionError", "Command", "Context", "Document", "UsageError"]
