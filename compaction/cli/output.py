"""How results and errors leave the process: one JSON document on stdout, or rich text for people.

Logs, progress and human-mode errors go to stderr, so stdout under ``--json`` holds exactly one
JSON document, success or failure.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from compaction.cli.command import Document
from compaction.errors import UsageError

PIPED_WIDTH = 200


def positive_int(text: str) -> int:
    """An ``argparse`` type: an integer >= 1 (anything else is a usage error)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def stdout_console() -> Console:
    """The console for human output; piped output gets wide lines instead of squeezed tables."""
    console = Console()
    return console if console.is_terminal else Console(width=PIPED_WIDTH)


def write_json(document: Document) -> None:
    sys.stdout.write(json.dumps(document, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def error_document(error: BaseException) -> Document:
    return {"error": {"type": type(error).__name__, "message": str(error)}}


def report_error(error: BaseException, *, as_json: bool, err: Console) -> None:
    """The failure as a JSON document on stdout, or as one clear line (and usage) on stderr."""
    if as_json:
        write_json(error_document(error))
        return
    if isinstance(error, UsageError) and error.usage:
        err.print(Text(error.usage.rstrip()), soft_wrap=True)
    err.print(Text(f"compaction: error: {error}", style="bold red"), soft_wrap=True)


def report_crash(error: BaseException, *, err: Console) -> None:
    """An unexpected failure under ``--json``: the JSON error on stdout, the traceback on stderr."""
    write_json(error_document(error))
    err.print(Text("".join(traceback.format_exception(error))), soft_wrap=True)


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> Table:
    """A rich table; numeric columns (every value an int) are right-aligned."""
    materialized = [list(row) for row in rows]
    grid = Table(title=title, title_justify="left")
    for index, name in enumerate(columns):
        numeric = bool(materialized) and all(_is_count(r[index]) for r in materialized)
        grid.add_column(name, justify="right" if numeric else "left")
    for row in materialized:
        grid.add_row(*(Text(_cell(value)) for value in row))
    return grid


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(map(str, value))
    return "" if value is None else str(value)
