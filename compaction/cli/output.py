"""How results and errors leave the process: data on stdout, everything said about it on stderr.

Under ``--json`` stdout holds exactly one JSON document, success or failure. Without it stdout holds
the command's result alone (the messages of ``show``, the request of ``audit --request``, the tables
of the other commands), so ``> file`` or ``| jq`` gets nothing else; headers, notes, hints, progress
and errors go to stderr.

Large values are written piece by piece (:func:`write_json`, :func:`write_text`), so a 50 MB message
is never held as one more string, nor as a string and its encoded bytes at once. Tables never cut a
value (:class:`~compaction.terminal.FittedTable`).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import traceback
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import msgspec
from rich.console import Console
from rich.text import Text

from compaction.cli.command import Document, console_for
from compaction.errors import UsageError
from compaction.terminal import FittedTable

CHUNK = 1 << 20
"""Characters written at a time: a long string leaves the process in pieces of this size."""


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 session``, ``2 sessions`` (``nouns`` when the plural is not ``noun + "s"``)."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


def positive_int(text: str) -> int:
    """An ``argparse`` type: an integer >= 1 (anything else is a usage error)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def invocation() -> str:
    """How to run this program again from the current directory, exactly as a hint should print it:
    ``compaction`` when that name on ``PATH`` is this program, else the path of the ``compaction``
    script that was run (``.venv/bin/compaction`` after ``make demo``, relative to the current
    directory when it lies below it). Run another way (``python -m``, inside a test), ``compaction``."""
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if script is None or script.name != "compaction" or not script.is_file():
        return "compaction"
    on_path = shutil.which("compaction")
    if on_path is not None and os.path.samefile(on_path, script):
        return "compaction"
    here = Path.cwd().absolute()
    absolute = script.absolute()
    shown = absolute.relative_to(here).as_posix() if absolute.is_relative_to(here) else str(absolute)
    return shlex.quote(shown if "/" in shown else f"./{shown}")


def stdout_console() -> Console:
    """The console for human output (:func:`compaction.cli.command.console_for`)."""
    return console_for(stderr=False)


# ---------------------------------------------------------------- data on stdout


def write_json(document: Document, stream: IO[str] | None = None) -> None:
    """One JSON document on one line. Each item of a top-level list is encoded and written on its
    own, so the document never exists whole as one string (``show`` of a huge message)."""
    out = sys.stdout if stream is None else stream
    _write_bytes(out, _json_pieces(document))
    out.flush()


def write_json_value(value: Any, stream: IO[str], *, indent: int = 2) -> None:
    """One JSON value, indented for people to read (``indent=0``: on one line)."""
    encoded = msgspec.json.encode(value)
    _write_bytes(stream, (msgspec.json.format(encoded, indent=indent) if indent else encoded, b"\n"))
    stream.flush()


def write_json_lines(items: Iterable[Any], stream: IO[str]) -> None:
    """A JSON array with one item per line, each item encoded and written on its own."""
    _write_bytes(stream, _array_lines(items))
    stream.flush()


def write_text(text: str, stream: IO[str]) -> None:
    """``text`` and a newline, in pieces of :data:`CHUNK` characters."""
    for start in range(0, len(text), CHUNK):
        stream.write(text[start : start + CHUNK])
    stream.write("\n")


def _json_pieces(document: Document) -> Iterator[bytes]:
    yield b"{"
    for index, (key, value) in enumerate(document.items()):
        yield (b"," if index else b"") + msgspec.json.encode(key) + b":"
        if isinstance(value, list):
            yield b"["
            for position, item in enumerate(value):
                if position:
                    yield b","
                yield msgspec.json.encode(item)  # on its own: joining would copy it
            yield b"]"
        else:
            yield msgspec.json.encode(value)
    yield b"}\n"


def _array_lines(items: Iterable[Any]) -> Iterator[bytes]:
    yield b"["
    for position, item in enumerate(items):
        yield b",\n" if position else b"\n"
        yield msgspec.json.encode(item)  # on its own: joining would copy it
    yield b"\n]\n"


def _write_bytes(stream: IO[str], pieces: Iterable[bytes]) -> None:
    """UTF-8 pieces to a text stream: straight to its binary buffer when it has one (no decoded
    copy), else decoded piece by piece (an ``io.StringIO`` in tests)."""
    buffer = getattr(stream, "buffer", None)
    if buffer is not None:
        stream.flush()  # what was written as text goes first
        for piece in pieces:
            buffer.write(piece)
        buffer.flush()
        return
    for piece in pieces:
        stream.write(piece.decode("utf-8"))


def silence_stdout() -> None:
    """The reader closed stdout (``| head``): send the rest to /dev/null so the exit is quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


# ---------------------------------------------------------------- errors on stderr (or the document)


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


# ---------------------------------------------------------------- tables


def table(
    title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]], *, caption: str | None = None
) -> FittedTable:
    """A table that never cuts a value; numeric columns (every value an int) are right-aligned.
    ``caption`` (printed under the table) says what it shows."""
    materialized = [list(row) for row in rows]
    numeric = tuple(
        bool(materialized) and all(_is_count(row[index]) for row in materialized)
        for index in range(len(columns))
    )
    cells = [[Text(_cell(value)) for value in row] for row in materialized]
    return FittedTable(title, tuple(columns), cells, numeric, caption)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(map(str, value))
    return "" if value is None else str(value)
