"""What every command is made of: a :class:`Command` entry and the :class:`Context` it runs in.

A command computes one JSON-ready :data:`Document` (``run``); the same document is either printed
as JSON (``--json``) or handed to the command's ``render`` for people, which prints the data alone on
stdout, and then to its ``comment``, which says what there is to say about it on stderr (headers,
notes, hints), so ``> file`` keeps only the data. To add a command, write a
``cmd_NAME.py`` module exporting ``COMMAND = Command(...)`` and add it to the table in
:mod:`compaction.cli.main`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from compaction.engine.settings import Settings
from compaction.errors import AmbiguousSessionError, SessionNotFoundError, UsageError
from compaction.sessions.store import SessionStore

Document = dict[str, Any]
"""A command's result: JSON-ready values only (str, int, float, bool, None, list, dict)."""


def _succeeded(document: Document) -> int:
    return 0


def _no_comment(document: Document, err: Console) -> None:
    """Nothing to say besides the data."""


@dataclass(frozen=True)
class Command:
    """One sub-command: its arguments, its work, and how people see the result."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[Context, argparse.Namespace], Document]
    render: Callable[[Document, Console], None]
    exit_status: Callable[[Document], int] = _succeeded
    comment: Callable[[Document, Console], None] = _no_comment
    """What people are told besides the data (headers, notes, hints, where a file went): printed
    on stderr after ``render`` has printed the data on stdout; never under ``--json``."""
    read_only: bool = False
    """The command needs an existing store (it reads, or changes what is stored): a SQLite store
    that does not exist is refused (StoreNotFoundError) instead of created. False only for the
    commands that put sessions in a store (``demo``, ``import``)."""


@dataclass
class Context:
    """The store URL and the consoles; the store itself opens on first use and closes at the end."""

    store_url: str
    json: bool
    err: Console = field(default_factory=lambda: Console(stderr=True))
    read_only: bool = False  # the command only reads: a SQLite store must exist already
    settings: Settings | None = None  # the --config file (or ./compaction.toml), when there is one
    strict_types: bool | None = None  # --strict-types (None: $COMPACTION_STRICT_TYPES decides)
    _store: SessionStore | None = None

    @property
    def store(self) -> SessionStore:
        """The store, opened on first use; a read-only command's open refuses a SQLite store that
        does not exist (:class:`~compaction.errors.StoreNotFoundError`) instead of creating its
        folders and an empty database."""
        if self._store is None:
            self._store = SessionStore.open(
                self.store_url, create=not self.read_only, strict_types=self.strict_types
            )
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def resolve_session(self, text: str) -> UUID:
        """The stored session whose id is ``text`` or starts with it."""
        return resolve_session(self.store, text)

    @contextmanager
    def progress(self, description: str, total: int) -> Iterator[Callable[[], None]]:
        """A progress bar on stderr (only on a terminal); yields the function that advances it."""
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.err,
            transient=True,
            disable=not self.err.is_terminal,
        ) as bar:
            task = bar.add_task(description, total=total)
            yield lambda: bar.advance(task)


def resolve_session(store: SessionStore, text: str) -> UUID:
    """Resolve a full session id or a unique prefix of one (hyphens optional, case-insensitive).
    An empty one is a :class:`UsageError`: it would match every session."""
    wanted = text.strip().lower()
    if not wanted:
        raise UsageError(
            f"expected a session id or a unique prefix of one (see `compaction sessions`), "
            f"got {'an empty' if not text else 'a blank'} SESSION argument {text!r}"
        )
    try:
        exact = UUID(wanted)
    except ValueError:
        exact = None
    if exact is not None:
        if not store.exists(exact):
            raise SessionNotFoundError(exact)
        return exact
    key = wanted.replace("-", "")
    matches = [sid for sid in store.session_ids() if key and sid.hex.startswith(key)]
    if not matches:
        raise SessionNotFoundError(text)
    if len(matches) > 1:
        raise AmbiguousSessionError(text, [str(m) for m in matches])
    return matches[0]
