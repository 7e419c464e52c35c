"""Every console example of README.md and docs/*.md is checked against the real command.

A command line is a line ``$ compaction ...`` in a ```console, ```sh or ```bash block (or a line
``compaction ...`` in a ```sh or ```bash block): each one must parse with the real command line
parser, its placeholders (``SESSION``, ``3f2a``) taken as the values they stand for.

A block that shows output (lines after a ``$`` line that do not start with ``$``) is run: each of its
commands in turn, in a fresh empty folder (so the default store ``./.compaction/sessions.db`` is new;
``tests/`` there is the repository's), with ``COLUMNS=120`` and without ``COMPACTION_STORE``. A
command followed at once by the next ``$`` line has its output left out of the example; the output
shown must be the command's stdout exactly, unless the block is abridged (it holds ``…`` or a
``...`` line): then each line shown must be a line of the real output, and in JSON every scalar
``"key": value`` shown must be in the real document. Ids (UUIDs, their 8-character prefixes, 64-hex
hashes) are masked on both sides: they differ from run to run.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from compaction.cli.main import build_parser
from tests.conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(console|sh|bash)\n(.*?)^```$", re.DOTALL | re.MULTILINE)
ID = re.compile(r"\b[0-9a-f]{8}(?:-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})?\b|\b[0-9a-f]{64}\b")
PAIR = re.compile(r'"(\w+)": (-?\d+(?:\.\d+)?|"[^"…]*"|true|false|null|\[[^\]…]*\])')
PROGRAM = [sys.executable, "-c", "import sys; from compaction.cli.main import main; sys.exit(main())"]


@dataclass
class Step:
    argv: list[str]
    shown: list[str] = field(default_factory=list)


@dataclass
class Example:
    page: str
    line: int
    steps: list[Step]
    abridged: bool

    @property
    def has_output(self) -> bool:
        return any(step.shown for step in self.steps)


def examples() -> list[Example]:
    found: list[Example] = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            steps = _steps(match.group(2), bare=match.group(1) != "console")
            if steps:
                abridged = "…" in match.group(2) or "\n...\n" in f"\n{match.group(2)}"
                found.append(Example(page.relative_to(ROOT).as_posix(), line, steps, abridged))
    return found


def _steps(body: str, *, bare: bool) -> list[Step]:
    steps: list[Step] = []
    for line in body.splitlines():
        command = line[2:] if line.startswith("$ ") else line if bare else None
        if command is not None and command.startswith("compaction "):
            steps.append(Step(shlex.split(command, comments=True)[1:]))
        elif steps and not line.startswith("$ ") and line.strip():
            steps[-1].shown.append(line)
    return steps


EXAMPLES = examples()
COMMANDS = [
    pytest.param(step.argv, id=f"{e.page}:{e.line}:{' '.join(step.argv)[:40]}")
    for e in EXAMPLES
    for step in e.steps
]
RUNS = [pytest.param(e, id=f"{e.page}:{e.line}") for e in EXAMPLES if e.has_output]


def test_the_docs_have_console_examples() -> None:
    pages = {e.page for e in EXAMPLES}
    assert {"README.md", "docs/audit.md", "docs/compaction.md", "docs/projections.md"} <= pages
    assert {e.page for e in EXAMPLES if e.has_output} >= {"docs/audit.md", "docs/compaction.md"}


@pytest.mark.parametrize("argv", COMMANDS)
def test_every_command_line_parses(argv: list[str]) -> None:
    build_parser().parse_args(argv)  # a UsageError names what does not parse


@pytest.mark.slow
@pytest.mark.parametrize("example", RUNS)
def test_the_output_shown_is_the_commands(example: Example, tmp_path: Path) -> None:
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    env = {k: v for k, v in os.environ.items() if k != "COMPACTION_STORE"}
    env["COLUMNS"] = "120"
    for step in example.steps:
        done = subprocess.run(
            [*PROGRAM, *step.argv], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=600, check=False,
        )  # fmt: skip
        where = f"{example.page} line {example.line}: compaction {' '.join(step.argv)}"
        assert done.returncode == 0, f"{where} failed:\n{done.stderr}"
        if step.shown:
            compare(step.shown, done.stdout, abridged=example.abridged, where=where)


def compare(shown: list[str], real: str, *, abridged: bool, where: str) -> None:
    if shown[0].startswith("{"):
        compare_json(" ".join(line.strip() for line in shown), real, abridged=abridged, where=where)
        return
    lines = [_masked(line) for line in real.splitlines()]
    wanted = [_masked(line) for line in shown if line.strip() != "..."]
    if not abridged:
        assert wanted == [line for line in lines if line], f"{where}: the output differs:\n{real}"
        return
    for line in wanted:
        assert line in lines, f"{where}: {line!r} is not a line of the output:\n{real}"


def compare_json(shown: str, real: str, *, abridged: bool, where: str) -> None:
    if not abridged:
        assert json.loads(_masked(shown)) == json.loads(_masked(real)), f"{where}:\n{real}"
        return
    flat = _masked(json.dumps(json.loads(real), ensure_ascii=False))
    pairs = PAIR.findall(_masked(shown))
    assert pairs, f"{where}: no value shown to check"
    for key, value in pairs:
        assert f'"{key}": {value}' in flat, f'{where}: "{key}": {value} is not in the output:\n{real}'


def _masked(text: str) -> str:
    return " ".join(ID.sub("ID", text).split())
