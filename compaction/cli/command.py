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
import contextlib
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote
from uuid import UUID

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from compaction.engine.settings import Settings
from compaction.errors import AmbiguousSessionError, SessionNotFoundError, UsageError
from compaction.sessions.store import SessionStore

PIPED_WIDTH = 200
"""Columns of a console that is not a terminal (unless ``COLUMNS`` is set)."""


def console_for(*, stderr: bool) -> Console:
    """A console on stdout or stderr. Not a terminal (a pipe, a file): lines are never wrapped (a
    suggested command stays on one line, whole) and tables get wide lines instead of squeezed
    columns, unless ``COLUMNS`` says how wide."""
    console = Console(stderr=stderr)
    if console.is_terminal or os.environ.get("COLUMNS", "").isdecimal():
        return console
    return Console(stderr=stderr, width=PIPED_WIDTH, soft_wrap=True)


def stderr_console() -> Console:
    """The console for commentary and errors (:func:`console_for`)."""
    return console_for(stderr=True)


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
    err: Console = field(default_factory=stderr_console)
    read_only: bool = False  # the command only reads: a SQLite store must exist already
    settings: Settings | None = None  # the --config file (or ./compaction.toml), when there is one
    strict_types: bool | None = None  # --strict-types (None: $COMPACTION_STRICT_TYPES decides)
    _store: SessionStore | None = None
    _created: list[Path] = field(default_factory=list)  # what opening the store created, deepest first

    @property
    def store(self) -> SessionStore:
        """The store, opened on first use; a read-only command's open refuses a SQLite store that
        does not exist (:class:`~compaction.errors.StoreNotFoundError`) instead of creating its
        folders and an empty database."""
        if self._store is None:
            missing = _missing_sqlite_paths(self.store_url)
            self._store = SessionStore.open(
                self.store_url, create=not self.read_only, strict_types=self.strict_types
            )
            self._created = [p for p in missing if p.exists()]
        return self._store

    def discard_new_store(self) -> None:
        """Close the store and remove what opening it created (the SQLite file, its journal files,
        the folders made for it), when this command created it and nothing is stored in it: a
        command that stored nothing leaves no empty store behind."""
        if self._store is None or not self._created or self._store.max_notification_id() > 0:
            return
        self.close()
        database = self._created[0]
        for suffix in ("-wal", "-shm", "-journal"):
            database.with_name(database.name + suffix).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            database.unlink()
        for folder in self._created[1:]:
            with contextlib.suppress(OSError):  # a folder something else wrote into stays
                folder.rmdir()
        self._created = []

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


def _missing_sqlite_paths(url: str) -> list[Path]:
    """For a ``sqlite:///PATH`` store that does not exist yet: PATH and each of its folders that
    does not exist, deepest first; else nothing."""
    if not url.startswith("sqlite:///"):
        return []
    raw = unquote(url[len("sqlite:///") :].partition("?")[0])
    if not raw or raw == ":memory:":
        return []
    path = Path(raw)
    missing: list[Path] = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing


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
