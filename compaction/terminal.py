"""Text for people on a terminal: tables that never cut a value, at any width.

Shared by the command line (:mod:`compaction.cli.output`) and the audit's terminal report
(:mod:`compaction.audit.report`), so every table the commands print follows one rule: an id, a seq
or a file name is printed whole. Rich alone would cut a value with an ellipsis when the terminal is
narrower than the table; :class:`FittedTable` wraps long values between words instead, and when not
even every column's longest word fits (an import table at 80 columns), prints one block of
``column  value`` lines per row; narrower still (a session id beside its label needs about 52
columns), each value on its own line under its column's name, so a 36-character id stays whole down
to 36 columns.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text


@dataclass(frozen=True)
class FittedTable:
    """Printed as a grid when every column gets at least its longest word (so no word is cut and
    long values wrap inside their column); on a terminal narrower than that, one block of
    ``column  value`` lines per row instead, values wrapping at the edge. Never an ellipsis."""

    title: str
    columns: tuple[str, ...]
    rows: list[list[Text]]
    numeric: tuple[bool, ...]
    caption: str | None = None

    def column_widths(self, available: int) -> list[int] | None:
        """Each column's width in a grid ``available`` cells wide, or None when the grid cannot
        keep every word whole. Every column gets its longest word; the space left goes to the
        columns whose lines are longer, the least needy first, so short columns print whole and
        long ones wrap between words."""
        texts = [(name, *(row[index].plain for row in self.rows)) for index, name in enumerate(self.columns)]
        widths = [max(map(_longest_word, column)) for column in texts]
        full = [max(map(_longest_line, column)) for column in texts]
        spare = available - sum(widths) - 3 * (len(self.columns) - 1)  # padding and border between
        if spare < 0:
            return None
        needy = sorted(range(len(widths)), key=lambda i: full[i] - widths[i])
        for position, index in enumerate(needy):
            given = min(full[index] - widths[index], spare // (len(needy) - position))
            widths[index] += given
            spare -= given
        return widths

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.title:  # its own line, wrapping at the terminal's edge rather than the table's
            yield Text(self.title, style="italic")
        widths = self.column_widths(options.max_width)
        if widths is None:
            yield from self.records(options.max_width)
        else:
            yield self.grid(widths)

    def grid(self, widths: Sequence[int]) -> Table:
        grid = Table(caption=self.caption, caption_justify="left", show_edge=False, pad_edge=False)
        for name, numeric, width in zip(self.columns, self.numeric, widths, strict=True):
            grid.add_column(name, justify="right" if numeric else "left", overflow="fold", width=width)
        for row in self.rows:
            grid.add_row(*row)
        return grid

    def records(self, available: int) -> Iterator[Text | Table]:
        label = max(map(cell_len, self.columns), default=0)
        longest = max((_longest_word(value.plain) for row in self.rows for value in row), default=0)
        stacked = label + 2 + longest > available  # a value beside its label would be cut
        for number, row in enumerate(self.rows, start=1):
            yield Text(f"[{number}/{len(self.rows)}]", style="dim")
            if stacked:
                for name, value in zip(self.columns, row, strict=True):
                    yield Text(name, style="bold")
                    yield Text("  ") + value if cell_len(value.plain) + 2 <= available else value
                continue
            block = Table.grid(padding=(0, 2))
            block.add_column(style="bold", no_wrap=True)
            block.add_column(overflow="fold")
            for name, value in zip(self.columns, row, strict=True):
                block.add_row(name, value)
            yield block
        if self.caption:
            yield Text(self.caption, style="dim")


def _longest_word(text: str) -> int:
    return max((cell_len(word) for word in text.split()), default=0)


def _longest_line(text: str) -> int:
    return max((cell_len(line) for line in text.splitlines()), default=0)
