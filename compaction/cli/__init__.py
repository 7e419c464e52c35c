"""The ``compaction`` command line: the one composition root allowed to import every layer.

``compaction [--store URL] COMMAND ... [--json]``; the entry point is
:func:`compaction.cli.main.main`. Each command is one module (``cmd_*.py``) exporting a
:class:`Command`, listed in the command table :data:`compaction.cli.main.COMMANDS`. See
``docs/cli.md`` for the contract every command keeps.
"""

from compaction.cli.command import Command, Context, Document
from compaction.errors import AmbiguousSessionError, UsageError

__all__ = ["AmbiguousSessionError", "Command", "Context", "Document", "UsageError"]
